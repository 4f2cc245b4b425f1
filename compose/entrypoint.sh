#!/bin/sh
# The twin image's entrypoint: `twin-entrypoint COMMAND...`.
#
# Started as root (the image's default user), it finds the log directory that COMMAND names
# (`--log-dir DIR`), drops to one user for good and runs COMMAND; nothing else runs as root,
# and nothing already in the directory changes owner:
#   - a directory of yours (a `mkdir` of your own, or ./runs from an earlier run): COMMAND runs
#     as its owner, so what it writes is yours;
#   - a directory owned by root (Docker Engine on Linux creates a missing bind-mount source such
#     as ./runs owned by root): the directory itself (not what is in it) is handed to the twin
#     user, and COMMAND runs as that user.
# Started as any other user (`--user`), it runs COMMAND as that user, and the log directory
# must already be writable by it.
#
# `twin serve` given no operator token (neither $TWIN_ADMIN_TOKEN nor --admin-token-file: a bare
# `docker run`, `openenv build` and its validator) gets a fresh one in a file only the user it
# runs as can read, named on stderr (`docker exec CONTAINER cat FILE`); a restart reuses it.
#
#   TWIN_UID               the user (and group) to run as; default: the log directory's owner,
#                          or 10001 (the image's `twin`) where root owns it
#   TWIN_LOG_DIRS          more directories to make writable, separated by spaces
#   TWIN_ADMIN_TOKEN_FILE  where a token made here goes (default /tmp/twin-admin-token)
set -eu
token_file=""
if [ "${1:-}" = twin ] && [ "${2:-}" = serve ] && [ -z "${TWIN_ADMIN_TOKEN:-}" ]; then
    token_file="${TWIN_ADMIN_TOKEN_FILE:-/tmp/twin-admin-token}"
    for arg in "$@"; do
        case "$arg" in --admin-token-file|--admin-token-file=*) token_file="" ;; esac
    done
fi
if [ -n "$token_file" ]; then
    if [ ! -s "$token_file" ]; then
        (umask 077 && python -c 'import secrets; print(secrets.token_urlsafe(24))' >"$token_file")
    fi
    set -- "$@" --admin-token-file "$token_file"
fi
announce_token() {  # $1: the uid that can read it
    if [ -n "$token_file" ]; then
        echo "twin-entrypoint: no operator token given: made one in $token_file (uid $1 only)" >&2
    fi
}

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
    uid="${TWIN_UID:-}"
    for dir in $dirs; do
        mkdir -p "$dir"
        owner="$(stat -c %u "$dir")"
        if [ -z "$uid" ]; then
            if [ "$owner" = 0 ]; then uid=10001; else uid="$owner"; fi
        fi
        if [ "$owner" = 0 ] && [ "$uid" != 0 ]; then
            chown "$uid:$uid" "$dir"  # the directory only: never what is already in it
        fi
    done
    uid="${uid:-10001}"
    if [ -n "$token_file" ]; then
        chown "$uid:$uid" "$token_file"
    fi
    home="$(getent passwd "$uid" | cut -d: -f6)" || home=""
    if [ -n "$home" ]; then
        export HOME="$home"
    fi
    announce_token "$uid"
    exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"
fi
announce_token "$(id -u)"
exec "$@"
