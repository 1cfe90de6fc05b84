#!/usr/bin/env bash
# images/rootfs.sh: a minimal root filesystem for a container: the given binaries, the shared
# libraries they load (their ldd closure, dynamic loader included), and the few files a
# non-root process expects (/etc/passwd, /etc/group, /etc/nsswitch.conf, CA certificates,
# /tmp). No shell, no package manager. Used by the Dockerfiles in images/ (in the build stage)
# and by hack/images.sh (on the host, without Docker), so both make the same layout.
#
#   images/rootfs.sh --out DIR [--exclude REGEX] BINARY...
#
# Binaries land in DIR/usr/bin/, libraries in DIR/usr/lib/<multiarch>/ under the name the
# binary asks for (symlinks resolved), the loader where PT_INTERP says. --exclude drops
# libraries whose path matches REGEX (e.g. the CUDA driver, which the NVIDIA container runtime
# injects, or libraries the base image already has). The user is nonroot, uid/gid 65532.
set -euo pipefail

out= exclude='^$'
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    --exclude) exclude=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) echo "rootfs: unknown option $1" >&2; exit 64 ;;
    *) break ;;
    esac
done
[ -n "$out" ] && [ $# -gt 0 ] || { echo "usage: images/rootfs.sh --out DIR [--exclude REGEX] BINARY..." >&2; exit 64; }
command -v ldd >/dev/null || { echo "rootfs: ldd not found (libc-bin)" >&2; exit 69; }

multiarch=$(gcc -print-multiarch 2>/dev/null || true)
[ -n "$multiarch" ] || multiarch=$(uname -m)-linux-gnu
libdir=usr/lib/$multiarch

mkdir -p "$out/usr/bin" "$out/$libdir" "$out/etc/ssl/certs" "$out/tmp" "$out/home/nonroot" \
    "$out/var/run" "$out/proc" "$out/sys" "$out/dev"
chmod 1777 "$out/tmp"
# Merged /usr, as Debian and Ubuntu lay it out: the loader path in every binary is /lib64/...
for d in bin lib; do [ -e "$out/$d" ] || ln -s "usr/$d" "$out/$d"; done

copy_lib() { # PATH-AS-LOADED
    local src=$1 base dest
    [[ $src =~ $exclude ]] && return 0
    base=$(basename "$src")
    dest=$out/$libdir/$base
    [ -e "$dest" ] || cp -L --preserve=mode "$src" "$dest"
}

for bin in "$@"; do
    [ -x "$bin" ] || { echo "rootfs: $bin is not an executable" >&2; exit 66; }
    install -m 0755 "$bin" "$out/usr/bin/$(basename "$bin")"
    # ldd output: "libx.so.1 => /path/libx.so.1 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)",
    # "linux-vdso.so.1 (0x...)" (in the kernel: skip), "libx.so.1 => not found" (fail, unless
    # excluded: e.g. libcuda.so.1 on a machine without a driver).
    while read -r line; do
        case "$line" in
        *"=> not found"*)
            name=${line%% *}
            [[ $name =~ $exclude ]] && continue
            echo "rootfs: $bin needs $name, which is not installed here" >&2
            exit 69
            ;;
        *" => /"*) p=${line#*=> }; copy_lib "${p%% (*}" ;;
        /*)
            interp=${line%% (*}
            [[ $interp =~ $exclude ]] && continue
            copy_lib "$interp"
            # The loader must also sit at the exact path in PT_INTERP (/lib64/ld-linux-x86-64.so.2).
            if [ "$(dirname "$interp")" != "/lib/$multiarch" ] && [ "$(dirname "$interp")" != "/$libdir" ]; then
                mkdir -p "$out$(dirname "$interp")"
                ln -sfn "/$libdir/$(basename "$interp")" "$out$interp"
            fi
            ;;
        esac
    done < <(ldd "$bin")
done

cat >"$out/etc/passwd" <<'PW'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PW
cat >"$out/etc/group" <<'GR'
root:x:0:
nonroot:x:65532:
GR
printf 'hosts: files dns\n' >"$out/etc/nsswitch.conf"
# libcurl verifies TLS against this bundle when a kubeconfig names a server without its CA.
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
    [ -f "$ca" ] && { install -m 0644 "$ca" "$out/etc/ssl/certs/ca-certificates.crt"; break; }
done
