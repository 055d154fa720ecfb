#!/bin/bash
# Container HEALTHCHECK: exits 0 when neardupd's GET /healthz answers 200.
# Plain bash (/dev/tcp), so the image needs no curl. Reads the port (and the
# host, unless it is a wildcard) from NEARDUP_LISTEN, as neardupd does.
set -u
listen="${NEARDUP_LISTEN:-127.0.0.1:8080}"
port="${listen##*:}"
host="${listen%:*}"
host="${host#[}"
host="${host%]}"
case "$host" in
    0.0.0.0 | "" | "*") host=127.0.0.1 ;;
    ::) host=::1 ;;
esac
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
IFS=' ' read -r -t 3 _ status _ <&3 || exit 1
[[ "$status" == 200 ]]
