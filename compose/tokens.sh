#!/bin/sh
# Writes fresh random tokens for the compose stack to FILE (default .env beside the compose
# files, where `docker compose` reads them), readable only by you; refuses to overwrite one.
#
#   sh compose/tokens.sh [FILE]
set -eu
out="${1:-.env}"
if [ -e "$out" ]; then
    echo "tokens.sh: $out exists; remove it to make new tokens" >&2
    exit 1
fi
umask 077
for name in ADMIN_TOKEN TOKEN_RESEARCH TOKEN_INFERENCE TOKEN_BATCH TOKEN_VISION TOKEN_CHAT \
    TOKEN_ETL TOKEN_LS TOKEN_BE TOKEN_BURSTABLE TOKEN_OTHER; do
    printf 'TWIN_%s=%s\n' "$name" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
done >"$out"
echo "tokens.sh: wrote the operator's and the tenants' tokens to $out (mode 0600)" >&2
