#!/usr/bin/env bash
# Builds everything the stack runs, from this checkout and local material only:
# the static binaries, the workload's base (APTL_WORKLOAD_BASE, or the cached
# offline stand-in), and the two images. Prints nothing on stdout but the
# image names it built, one `NAME=value` per line.
#
#   APTL_WORKLOAD_BASE   base of the workload image; unset: the local
#                        debootstrap stand-in (compose/base/make-local-base.sh).
#                        Labs with registry access: kalilinux/kali-rolling
#   APTL_CAPTURE_IMAGE   sidecar image tag   (default aptl-kali-capture:local)
#   APTL_WORKLOAD_IMAGE  workload image tag  (default aptl-kali-workload:local)
#   APTL_AGENT_DIR       where the agent's files for the workload's read-only
#                        mount go (default compose/local/agent)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export PATH="/usr/local/go/bin:$PATH"

capture_image=${APTL_CAPTURE_IMAGE:-aptl-kali-capture:local}
workload_image=${APTL_WORKLOAD_IMAGE:-aptl-kali-workload:local}
base=${APTL_WORKLOAD_BASE:-}
if [ -z "$base" ]; then
	base=$("$here/base/make-local-base.sh")
fi

stage=$(mktemp -d /var/tmp/aptl-compose-build.XXXXXX)
trap 'rm -rf "$stage"' EXIT

echo "build: static binaries" >&2
# The version the binaries report (version, the SSH banner): the checkout's
# git describe, stamped in, since -trimpath in a staging build carries no VCS
# data of its own.
version=$(cd "$repo" && git describe --always --dirty 2>/dev/null || echo unknown)
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-X main.stampedVersion=$version" -o "$stage/" ./cmd/aptl-kali-capture ./cmd/aptl-launch-agent)

# The sidecar's mount points, owned by its uid (0) through COPY --chown.
mkdir -p "$stage/capture-rootfs/var/log/aptl/captures" "$stage/capture-rootfs/var/lib/aptl-kali-capture" "$stage/capture-rootfs/run" \
	"$stage/capture-rootfs/var/lib/aptl-kali-capture-ready" "$stage/capture-rootfs/var/lib/aptl-witness" "$stage/capture-rootfs/usr/local/share/aptl-kali-capture"
chmod 0700 "$stage/capture-rootfs/var/log/aptl/captures" "$stage/capture-rootfs/var/lib/aptl-kali-capture" "$stage/capture-rootfs/run" \
	"$stage/capture-rootfs/var/lib/aptl-witness"
# The audit witness's rules (compose/capture/audit.rules says why not
# docs/audit-lab.rules as it is), outside /etc/aptl-kali-capture, where
# Kubernetes mounts the authorized keys' Secret as a whole folder.
install -m 0444 "$here/capture/audit.rules" "$stage/capture-rootfs/usr/local/share/aptl-kali-capture/audit.rules"
# The readiness file's directory: the workload's supervisor (root) reads it.
chmod 0755 "$stage/capture-rootfs/var/lib/aptl-kali-capture-ready"
cp "$here/kali/aptl-agent-supervise" "$stage/"

# The agent's files for the workload's read-only mount (APTL_AGENT_DIR,
# docker-compose.yml): each replaced by a rename, since a running agent's
# binary cannot be written in place (ETXTBSY) and a running stack sees the
# new files at the agent's next start.
agent_dir=${APTL_AGENT_DIR:-$here/local/agent}
mkdir -p "$agent_dir"
chmod 0755 "$agent_dir"
for f in aptl-launch-agent aptl-agent-supervise; do
	install -m 0555 "$stage/$f" "$agent_dir/.$f.new"
	mv -f "$agent_dir/.$f.new" "$agent_dir/$f"
done

echo "build: $capture_image" >&2
docker build -q -f "$here/capture/Dockerfile" -t "$capture_image" "$stage" >/dev/null
echo "build: $workload_image from $base" >&2
docker build -q -f "$here/kali/Dockerfile" --build-arg "BASE=$base" -t "$workload_image" "$stage" >/dev/null
echo "APTL_CAPTURE_IMAGE=$capture_image"
echo "APTL_WORKLOAD_IMAGE=$workload_image"
