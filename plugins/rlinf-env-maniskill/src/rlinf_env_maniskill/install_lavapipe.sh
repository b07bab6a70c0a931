#!/usr/bin/env bash
# Install a private copy of Mesa's software Vulkan driver (lavapipe, Mesa >= 24.3) for SAPIEN /
# ManiSkill on machines without a GPU. Nothing is installed system-wide: the Debian packages are
# downloaded with a private apt configuration and unpacked into DIR.
#
#   install_lavapipe.sh [--force] [DIR]
#
# DIR defaults to $RLINF_LAVAPIPE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/rlinf/lavapipe (the
# directory rlinf-env-maniskill looks in at run time). Re-running is cheap: an existing complete
# install is kept unless --force is given. Works as root or as a normal user on Debian 12
# (bookworm: packages from bookworm-backports) and Debian >= 13 (from the main archive).
#
# Package source: the machine's own apt sources (mirrors) and settings (proxies, in apt.conf.d); bookworm
# gets bookworm-backports added on the first Debian mirror found there. A failed download leaves nothing
# (no half-installed tree, no work files); a previous complete install stays as it was.
# Environment: RLINF_DEBIAN_MIRROR (use this mirror instead of the machine's sources),
#              RLINF_DEBIAN_SUITE (default: from /etc/os-release), RLINF_APT_ETC (default /etc/apt).
set -euo pipefail

FORCE=0
DIR=""
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install_lavapipe.sh: unknown option $arg (use --force or --help)" >&2; exit 2 ;;
    *) DIR="$arg" ;;
  esac
done
DIR="${DIR:-${RLINF_LAVAPIPE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rlinf/lavapipe}}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
APT_ETC="${RLINF_APT_ETC:-/etc/apt}"
ARCH_TRIPLET="x86_64-linux-gnu"
LIBDIR="$DIR/rootfs/usr/lib/$ARCH_TRIPLET"
ICD="$DIR/lvp_icd.json"
STAMP="$DIR/INSTALLED"

say() { echo "[install_lavapipe] $*"; }
die() { echo "[install_lavapipe] error: $*" >&2; exit 1; }

# One install at a time (CI jobs and users may run this concurrently).
exec 9>"$DIR/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

if [[ $FORCE -eq 0 && -f "$STAMP" && -f "$ICD" && -f "$LIBDIR/libvulkan_lvp.so" ]]; then
  say "already installed in $DIR ($(head -n1 "$STAMP")); use --force to reinstall"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this installer needs Debian 12 or newer. \
Elsewhere install Mesa >= 24.3 'mesa-vulkan-drivers' (lavapipe) with the system package manager."
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
[[ "$(dpkg --print-architecture)" == "amd64" ]] || die "only amd64 is supported, got $(dpkg --print-architecture)"

SUITE="${RLINF_DEBIAN_SUITE:-}"
if [[ -z "$SUITE" && -r /etc/os-release ]]; then
  SUITE="$(. /etc/os-release; echo "${VERSION_CODENAME:-}")"
fi
case "$SUITE" in
  bookworm) SUITES=(bookworm bookworm-backports); TARGET="bookworm-backports" ;;
  trixie|forky|sid) SUITES=("$SUITE"); TARGET="$SUITE" ;;
  *) die "unsupported distribution '${SUITE:-unknown}': this installer supports Debian 12 (bookworm) and newer. \
Set RLINF_DEBIAN_SUITE=bookworm to force, or install Mesa >= 24.3 'mesa-vulkan-drivers' with your package manager." ;;
esac

WORK="$DIR/.work"
rm -rf "$WORK"
trap 'rm -rf "$WORK"' EXIT  # whatever happens, no work files (partial downloads) stay behind
mkdir -p "$WORK/etc/sources.list.d" "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/debs"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
SIGNED=""
[[ -r "$KEYRING" ]] && SIGNED="[signed-by=$KEYRING] "
: > "$WORK/etc/sources.list"
if [[ -n "${RLINF_DEBIAN_MIRROR:-}" ]]; then
  MIRROR="$RLINF_DEBIAN_MIRROR"
  for s in "${SUITES[@]}"; do echo "deb ${SIGNED}$MIRROR $s main" >> "$WORK/etc/sources.list"; done
else
  # the machine's own sources (one-line and deb822 formats), so its mirror / local proxy cache is used
  [[ -r "$APT_ETC/sources.list" ]] && cp "$APT_ETC/sources.list" "$WORK/etc/sources.list"
  for f in "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
    [[ -r "$f" ]] && cp "$f" "$WORK/etc/sources.list.d/"
  done
  MIRROR="$(cat "$WORK/etc/sources.list" "$WORK"/etc/sources.list.d/* 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -oE '(https?|file)://[^[:space:]]+' | grep -v -- '-security' | head -n1 || true)"
  [[ -n "$MIRROR" ]] || die "no Debian package source found in $APT_ETC/sources.list{,.d}: configure apt, \
or set RLINF_DEBIAN_MIRROR=http://deb.debian.org/debian"
  for s in "${SUITES[@]}"; do
    if ! grep -rqsE "(^|[[:space:]])$s([[:space:]]|\$)" "$WORK/etc/sources.list" "$WORK/etc/sources.list.d"; then
      echo "deb ${SIGNED}$MIRROR $s main" >> "$WORK/etc/sources.list"
    fi
  done
fi
cat > "$WORK/etc/apt.conf" <<EOF
Dir::Etc::SourceList "$WORK/etc/sources.list";
Dir::Etc::SourceParts "$WORK/etc/sources.list.d";
Dir::State::Lists "$WORK/lists";
Dir::Cache "$WORK/cache";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
Debug::NoLocking "true";
EOF
if [[ "$(id -u)" == "0" ]]; then echo 'APT::Sandbox::User "root";' >> "$WORK/etc/apt.conf"; fi
export APT_CONFIG="$WORK/etc/apt.conf"

say "reading package lists for ${SUITES[*]} from $MIRROR"
apt-get -q -o Dpkg::Use-Pty=0 update >"$WORK/update.log" 2>&1 || { cat "$WORK/update.log" >&2; die "apt-get update failed"; }

# What apt would install or upgrade for mesa-vulkan-drivers from $TARGET, given what this system
# already has (the system's dpkg status is used, nothing is changed). On a fresh machine this also
# brings LLVM, xcb, ... libraries that are not installed.
PKGS=()
if apt-get -s -q --no-install-recommends install "mesa-vulkan-drivers/$TARGET" >"$WORK/sim.log" 2>&1; then
  while read -r name ver; do PKGS+=("$name=$ver"); done < <(sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\{0,1\}(\([^ ]*\) .*/\1 \3/p' "$WORK/sim.log")
else
  say "apt could not plan an install against this system's packages (see below); using the minimal set"
  tail -n 5 "$WORK/sim.log" >&2 || true
fi
if [[ ${#PKGS[@]} -eq 0 ]]; then
  if grep -q "mesa-vulkan-drivers is already the newest version" "$WORK/sim.log" 2>/dev/null; then
    say "note: the system already has mesa-vulkan-drivers from $TARGET; installing a private copy anyway"
  fi
  PKGS=("mesa-vulkan-drivers/$TARGET" "libdrm2/$TARGET" "libdrm-amdgpu1/$TARGET" "libdrm-common/$TARGET" libvulkan1)
fi
say "downloading: ${PKGS[*]}"
(cd "$WORK/debs" && apt-get -q download "${PKGS[@]}" >"$WORK/download.log" 2>&1) \
  || { cat "$WORK/download.log" >&2; die "apt-get download failed"; }

STAGE="$WORK/rootfs"
for deb in "$WORK"/debs/*.deb; do dpkg-deb -x "$deb" "$STAGE"; done
# Some bookworm packages still ship libraries under /lib: merge them as on a usr-merged system.
if [[ -d "$STAGE/lib/$ARCH_TRIPLET" ]]; then
  mkdir -p "$STAGE/usr/lib/$ARCH_TRIPLET"
  cp -a "$STAGE/lib/$ARCH_TRIPLET/." "$STAGE/usr/lib/$ARCH_TRIPLET/"
fi
[[ -f "$STAGE/usr/lib/$ARCH_TRIPLET/libvulkan_lvp.so" ]] || die "libvulkan_lvp.so missing from the downloaded packages"

# Every library lavapipe needs must resolve against the private dir + the system.
if command -v ldd >/dev/null 2>&1; then
  MISSING="$(LD_LIBRARY_PATH="$STAGE/usr/lib/$ARCH_TRIPLET" ldd "$STAGE/usr/lib/$ARCH_TRIPLET/libvulkan_lvp.so" | grep 'not found' || true)"
  [[ -z "$MISSING" ]] || die "lavapipe has unresolved libraries: $(echo "$MISSING" | tr -s ' \n' ' ')"
fi

API_VERSION="$(sed -n 's/.*"api_version": *"\([^"]*\)".*/\1/p' "$STAGE/usr/share/vulkan/icd.d/lvp_icd.json" | head -n1)"
MESA_VERSION="$(ls "$WORK"/debs/mesa-vulkan-drivers_*.deb | sed 's/.*mesa-vulkan-drivers_\([^_]*\)_.*/\1/' | sed 's/%3a/:/')"

# Swap the new tree in only once it is complete (no stamp while swapping: an interrupted swap reinstalls).
rm -f "$STAMP"
rm -rf "$DIR/rootfs.old"
[[ -d "$DIR/rootfs" ]] && mv "$DIR/rootfs" "$DIR/rootfs.old"
mv "$STAGE" "$DIR/rootfs"
rm -rf "$DIR/rootfs.old"
cat > "$ICD.tmp" <<EOF
{"file_format_version": "1.0.0", "ICD": {"library_path": "$LIBDIR/libvulkan_lvp.so", "api_version": "${API_VERSION:-1.3.0}"}}
EOF
mv "$ICD.tmp" "$ICD"
{
  echo "mesa-vulkan-drivers $MESA_VERSION"
  printf '%s\n' "${PKGS[@]}"
} > "$STAMP"
rm -rf "$WORK"
say "installed lavapipe (mesa $MESA_VERSION) into $DIR"
say "rlinf-env-maniskill finds it automatically; other programs need:"
say "  export VK_ICD_FILENAMES=$ICD LD_LIBRARY_PATH=$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
