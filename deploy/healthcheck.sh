#!/bin/bash
# Container health check for the treespark image: exits 0 only when GET /health answers 200 (the server is loaded,
# has its cost curve and is not draining); 503 "loading" / "draining" and any connection failure exit 1.
# Uses bash's /dev/tcp so the runtime image needs no HTTP client. Docker's HEALTHCHECK runs it; Kubernetes
# ignores HEALTHCHECK and probes /health itself (deploy/k8s/treespark.yaml).
set -u
port="${TREESPARK_HEALTH_PORT:-8080}"
exec 3<>"/dev/tcp/127.0.0.1/${port}" 2>/dev/null || exit 1
printf 'GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
IFS= read -r -t 5 status_line <&3 || exit 1
exec 3<&-
case "${status_line}" in
  "HTTP/1.1 200 "* | "HTTP/1.0 200 "*) exit 0 ;;
  *) exit 1 ;;
esac
