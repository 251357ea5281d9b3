#!/usr/bin/env bash
# Builds the offline stand-in for the workload's base image: a Debian bookworm
# minbase made with debootstrap from the Debian archive apt already uses, then
# `docker import`ed. The tag names the package list, so a rerun with the same
# list reuses the image (seconds) and a changed list builds a new one.
#
# Prints the image tag on stdout; everything else goes to stderr.
# Needs root, debootstrap and a reachable Debian archive (APTL_DEBIAN_MIRROR,
# default http://deb.debian.org/debian).
set -euo pipefail

# What the workload and the live tests use: bash, sudo and the kali user's
# login; procps (ps, pkill), iproute2 (ss), util-linux and findutils for the
# boundary checks; tini supervises the launch agent's supervisor as PID 1;
# perl-base for the live tests' port squatter.
packages="bash,sudo,procps,iproute2,util-linux,findutils,tini,perl-base,ca-certificates"
mirror="${APTL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
digest=$(printf '%s %s' "$suite" "$packages" | sha256sum | cut -c1-12)
tag="${APTL_LOCAL_BASE_TAG:-aptl-local-base:${suite}-minbase-${digest}}"

if docker image inspect "$tag" >/dev/null 2>&1; then
	echo "local base: reusing $tag" >&2
	echo "$tag"
	exit 0
fi

command -v debootstrap >/dev/null || { echo "local base: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/aptl-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "local base: debootstrap --variant=minbase $suite into $work (about a minute)" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -n 20 "$work/debootstrap.log" >&2
	echo "local base: debootstrap failed" >&2
	exit 1
}
# apt's lists and caches are not needed at run time.
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
tar -C "$work/root" -c . | docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "local base: imported $tag" >&2
echo "$tag"
