#!/bin/sh
# The twin image's entrypoint: `twin-entrypoint COMMAND...`.
#
# Started as root (the image's default user), it makes the log directory that COMMAND names
# (`--log-dir DIR`) writable by the twin user whoever created it (Docker Engine on Linux
# creates a missing bind-mount source such as ./runs owned by root; a `mkdir` of your own
# leaves it yours), then drops to that user for good and runs COMMAND. Nothing else runs as root. Started as any other user (`--user`), it runs
# COMMAND as that user, and the log directory must already be writable by it.
#
#   TWIN_UID       the user (and group) to run as; default 10001, the image's `twin`
#   TWIN_LOG_DIRS  more directories to make writable, separated by spaces
set -eu
uid="${TWIN_UID:-10001}"
if [ "$(id -u)" = 0 ]; then
    dirs="${TWIN_LOG_DIRS:-}"
    previous=""
    for arg in "$@"; do
        case "$previous:$arg" in
            --log-dir:*) dirs="$dirs $arg" ;;
            *:--log-dir=*) dirs="$dirs ${arg#--log-dir=}" ;;
        esac
        previous="$arg"
    done
    for dir in $dirs; do
        mkdir -p "$dir"
        chown -R "$uid:$uid" "$dir"
    done
    home="$(getent passwd "$uid" | cut -d: -f6)" || home=""
    if [ -n "$home" ]; then
        export HOME="$home"
    fi
    exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"
fi
exec "$@"
