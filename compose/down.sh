#!/usr/bin/env bash
# Stops the lab pair and removes its containers, network and volumes
# (the captures too: harvest first). APTL_COMPOSE_PROJECT as for up.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
APTL_AUTHORIZED_KEYS=${APTL_AUTHORIZED_KEYS:-/dev/null} \
	docker-compose -p "${APTL_COMPOSE_PROJECT:-aptl}" down --volumes --remove-orphans
