#!/bin/sh
# Makes a Debian bookworm base image with Python 3.11 for the Dockerfile's PYTHON build
# argument, where the default base (python:3.11-slim-bookworm) cannot be pulled:
#
#   sh compose/base-image.sh [NAME]        # default NAME: cluster-twin-base:bookworm
#   docker build --build-arg PYTHON=cluster-twin-base:bookworm --target twin .
#   TWIN_BASE_IMAGE=cluster-twin-base:bookworm docker compose up --build
#
# It runs debootstrap (minbase, with python3, python3-venv, python-is-python3 and
# ca-certificates; about 80 s) into a temporary directory and imports the result with
# `docker import`. The host's CA bundle replaces the image's, and pip inside the image is told
# to use it (/etc/pip.conf), so package traffic through a proxy that signs with its own CA
# verifies inside builds as it does on the host. Needs root, debootstrap and a Docker daemon;
# an image of that name already there is kept unless FORCE=1.
#
#   MIRROR    the Debian mirror (default: http://deb.debian.org/debian)
#   CA_BUNDLE the CA bundle to carry (default: /etc/ssl/certs/ca-certificates.crt)
set -eu
name="${1:-cluster-twin-base:bookworm}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
bundle="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
docker="${DOCKER:-docker}"

if [ "${FORCE:-0}" != 1 ] && "$docker" image inspect "$name" >/dev/null 2>&1; then
    echo "base-image: $name is already there (FORCE=1 makes it again)"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "base-image: debootstrap is missing (apt-get install debootstrap)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "base-image: debootstrap needs root" >&2; exit 2; }
[ -r "$bundle" ] || { echo "base-image: no CA bundle at $bundle (set CA_BUNDLE)" >&2; exit 2; }

root="$(mktemp -d "${TMPDIR:-/tmp}/twin-base.XXXXXX")"
trap 'rm -rf "$root"' EXIT INT TERM
debootstrap --variant=minbase \
    --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
cp "$bundle" "$root/etc/ssl/certs/ca-certificates.crt"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | "$docker" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    - "$name" >/dev/null
echo "base-image: made $name"
