#!/usr/bin/env bash
# Builds everything from local material (compose/build.sh) and brings the lab
# pair up, then waits (at most 120 s) until the sidecar is healthy and prints
# how to connect with a pinned host key.
#
#   APTL_COMPOSE_PROJECT  Compose project name (default aptl)
#   APTL_AUTHORIZED_KEYS  the tool servers' authorized_keys; unset: a client
#                         key is made once in compose/local/ and authorized
#   APTL_SSH_BIND, APTL_SSH_PORT  published address (127.0.0.1:2222)
#   APTL_SKIP_BUILD=1     use the images already built
# and the build settings of compose/build.sh (APTL_WORKLOAD_BASE, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=${APTL_COMPOSE_PROJECT:-aptl}

if [ "${APTL_SKIP_BUILD:-0}" != 1 ]; then
	while IFS= read -r line; do export "$line"; done < <("$here/build.sh")
fi

agent_dir=${APTL_AGENT_DIR:-$here/local/agent}
if [ ! -x "$agent_dir/aptl-launch-agent" ] || [ ! -x "$agent_dir/aptl-agent-supervise" ]; then
	echo "up: $agent_dir lacks the agent's files (the workload mounts them read-only); run compose/build.sh, or set APTL_AGENT_DIR" >&2
	exit 1
fi
export APTL_AGENT_DIR="$agent_dir"

if [ -z "${APTL_AUTHORIZED_KEYS:-}" ]; then
	mkdir -p "$here/local"
	if [ ! -s "$here/local/client_ed25519" ]; then
		ssh-keygen -q -t ed25519 -N '' -C aptl-tool-server -f "$here/local/client_ed25519"
	fi
	cp "$here/local/client_ed25519.pub" "$here/local/authorized_keys"
	export APTL_AUTHORIZED_KEYS="$here/local/authorized_keys"
fi

cd "$here"
docker-compose -p "$project" up -d

echo "up: waiting for aptl-kali-capture to be healthy" >&2
for _ in $(seq 1 120); do
	status=$(docker inspect -f '{{.State.Health.Status}}' aptl-kali-capture 2>/dev/null || true)
	[ "$status" = healthy ] && break
	sleep 1
done
if [ "$status" != healthy ]; then
	echo "up: aptl-kali-capture is not healthy ($status); its logs:" >&2
	docker logs --tail 30 aptl-kali-capture >&2
	exit 1
fi

port=${APTL_SSH_PORT:-2222}
bind=${APTL_SSH_BIND:-127.0.0.1}
# hostkey prints the known_hosts line alone on stdout (the SHA256
# fingerprint on stderr), reading the key the running sidecar serves.
docker exec aptl-kali-capture aptl-kali-capture hostkey -host "[$bind]:$port" >"$here/local/known_hosts"
cat <<MSG
up: healthy. Host key pinned in $here/local/known_hosts. Connect with:

  ssh -p $port -i $here/local/client_ed25519 -o IdentitiesOnly=yes \\
      -o StrictHostKeyChecking=yes -o UserKnownHostsFile=$here/local/known_hosts kali@$bind
MSG
