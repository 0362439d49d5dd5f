#!/usr/bin/env bash
# The systemd integration as `meson install` lays it out: installs the build
# into a temporary DESTDIR (no root needed), then checks the configured unit
# (Type=notify-reload with systemd >= 253, else Type=notify + ExecReload=;
# paths from the Meson prefix; the GPU device allow-list, no PrivateDevices=;
# stop timeout over the drain time), runs `systemd-analyze verify` on it and
# fails on any line it prints, prints `systemd-analyze security --offline=yes`'s
# exposure level (no score asserted), and checks the sysusers.d and tmpfiles.d
# snippets with systemd-sysusers --dry-run and (as root, inside the DESTDIR)
# systemd-tmpfiles --create, else by parsing them.
# Needs (from tests/integration/meson.build): SINKD_BUILD_ROOT, SINKD_BIN,
# SINKD_SHARED, SINKD_SOURCE_ROOT and the SINKD_SD_* values systemd/meson.build
# configured.  Skips (77) only when systemd-analyze is missing.
set -u
command -v systemd-analyze >/dev/null 2>&1 || { echo "SKIP: systemd-analyze is missing"; exit 77; }
build=${SINKD_BUILD_ROOT:?}
src=${SINKD_SOURCE_ROOT:?}
sd_version=${SINKD_SD_VERSION:?}
sd_type=${SINKD_SD_TYPE:?}
unitdir=${SINKD_SD_UNITDIR:?}
sysusersdir=${SINKD_SD_SYSUSERSDIR:?}
tmpfilesdir=${SINKD_SD_TMPFILESDIR:?}
bindir=${SINKD_SD_BINDIR:?}
docdir=${SINKD_SD_DOCDIR:?}
base_only=1 . "$(dirname "$0")/server-lib.sh"

# Unit lines without comments and blank lines.
settings() { grep -v -E '^[[:space:]]*(#|;|$)' "$1"; }
has() { settings "$unit" | grep -q -x -F -- "$1"; }
lacks_key() { ! settings "$unit" | grep -q -E "^$1="; }
# Fails when the captured output has any line at all (shows it).
silent() { # file
	if [ -s "$1" ]; then sed 's/^/    | /' "$1"; return 1; fi
	return 0
}

# --- install into a DESTDIR --------------------------------------------------
root=$tmp/root
meson=$(command -v meson || true)
check "meson is on PATH (to run meson install)" [ -n "$meson" ]
[ -n "$meson" ] || finish
"$meson" install -C "$build" --destdir "$root" --no-rebuild --quiet >"$tmp/install.log" 2>&1
rc=$?
[ $rc -eq 0 ] || sed 's/^/    | /' "$tmp/install.log"
check "meson install --destdir exits 0" [ $rc -eq 0 ]

unit=$root$unitdir/sinkd.service
check "unit installed in the systemd unit dir ($unitdir)" [ -f "$unit" ]
check "binary installed in bindir ($bindir)" [ -x "$root$bindir/sinkd" ]
check "sysusers snippet installed ($sysusersdir/sinkd.conf)" [ -f "$root$sysusersdir/sinkd.conf" ]
check "tmpfiles snippet installed ($tmpfilesdir/sinkd.conf)" [ -f "$root$tmpfilesdir/sinkd.conf" ]
check "example config installed as $docdir/sinkd.yaml.example" \
	cmp -s "$src/config/sinkd.yaml" "$root$docdir/sinkd.yaml.example"
check "nothing installed under /etc" [ ! -e "$root/etc" ]
[ -f "$unit" ] || finish

# --- the unit's settings -----------------------------------------------------
echo "# systemd $sd_version at configure time; unit Type=$sd_type"
if systemd-analyze compare-versions "$sd_version" ge 253 >/dev/null 2>&1; then
	want_type=notify-reload
else
	want_type=notify
fi
check "configured type is $want_type for systemd $sd_version" [ "$sd_type" = "$want_type" ]
check "Type=$want_type" has "Type=$want_type"
if [ "$want_type" = notify-reload ]; then
	check "notify-reload: systemd sends SIGHUP (ReloadSignal=SIGHUP)" has "ReloadSignal=SIGHUP"
	check "notify-reload: no ExecReload=" lacks_key ExecReload
else
	check "notify: ExecReload= sends SIGHUP" has 'ExecReload=/bin/kill -HUP $MAINPID'
	check "notify: no ReloadSignal= (unknown before 253)" lacks_key ReloadSignal
fi
check "no @placeholder@ left unconfigured" bash -c '! grep -q "@[A-Za-z_]*@" "$1"' _ "$unit"
check "ExecStartPre validates the config" has "ExecStartPre=$bindir/sinkd --check-config /etc/sinkd/sinkd.yaml"
check "ExecStart from the prefix's bindir" has "ExecStart=$bindir/sinkd --config /etc/sinkd/sinkd.yaml"
for s in NotifyAccess=main KillSignal=SIGTERM WatchdogSec=30 Restart=on-failure User=sinkd \
	Group=sinkd ConfigurationDirectory=sinkd StateDirectory=sinkd CapabilityBoundingSet= \
	NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
	ProtectKernelTunables=yes ProtectKernelModules=yes ProtectKernelLogs=yes \
	ProtectControlGroups=yes "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX" \
	RestrictNamespaces=yes LockPersonality=yes SystemCallArchitectures=native; do
	check "$s" has "$s"
done
check "LimitNOFILE= is set" bash -c 'grep -q -E "^LimitNOFILE=[0-9]+$" "$1"' _ "$unit"

# GPU: a closed device policy with the NVIDIA nodes, not PrivateDevices=.
check "DevicePolicy=closed" has "DevicePolicy=closed"
for d in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-modeset char-nvidia-frontend; do
	check "DeviceAllow=$d rw" has "DeviceAllow=$d rw"
done
check "no PrivateDevices=" lacks_key PrivateDevices
check "no MemoryDenyWriteExecute= (the CUDA JIT needs W+X pages)" lacks_key MemoryDenyWriteExecute

# The stop timeout covers the drain: drain_grace_s + drain_timeout_s from the
# example config when it names them, else the defaults (5 + 30).
key_s() { # key default
	local v
	v=$(sed -n -E "s/^[[:space:]]+$1:[[:space:]]*([0-9.]+).*/\1/p" "$src/config/sinkd.yaml" | head -1)
	echo "${v:-$2}"
}
drain_s=$(awk -v a="$(key_s drain_grace_s 5)" -v b="$(key_s drain_timeout_s 30)" 'BEGIN { print a + b }')
stop=$(settings "$unit" | sed -n 's/^TimeoutStopSec=//p' | tail -1)
stop_us=$(systemd-analyze timespan "${stop:-none}" 2>/dev/null | sed -n 's/^ *μs: //p')
echo "# TimeoutStopSec=$stop (${stop_us:-?} us); drain ${drain_s} s"
check "TimeoutStopSec exceeds drain_grace_s + drain_timeout_s" \
	awk -v t="${stop_us:-0}" -v d="$drain_s" 'BEGIN { exit !(t > d * 1000000) }'

# Documentation= points at installed files.
for url in $(settings "$unit" | sed -n 's/^Documentation=//p'); do
	case $url in
	file://*) check "Documentation $url is installed" [ -f "$root${url#file://}" ] ;;
	esac
done

# --- systemd-analyze verify --------------------------------------------------
# verify checks that the Exec*= binaries exist: verify a copy (same name)
# whose sinkd paths point into the DESTDIR.  Any output line is a failure.
mkdir -p "$tmp/verify" "$tmp/bogus"
sed "s|$bindir/sinkd|$root$bindir/sinkd|g" "$unit" >"$tmp/verify/sinkd.service"
systemd-analyze verify "$tmp/verify/sinkd.service" >"$tmp/verify.out" 2>&1
rc=$?
echo "# systemd-analyze verify: rc $rc, $(wc -l <"$tmp/verify.out") line(s)"
check "systemd-analyze verify exits 0" [ $rc -eq 0 ]
check "systemd-analyze verify prints nothing (no warnings)" silent "$tmp/verify.out"
# The same check must see a broken copy (the assertion can fail).
{ cat "$tmp/verify/sinkd.service"; echo 'NoSuchSetting=1'; } >"$tmp/bogus/sinkd.service"
systemd-analyze verify "$tmp/bogus/sinkd.service" >"$tmp/bogus.out" 2>&1
check "verify reports an unknown key in a broken copy" grep -q NoSuchSetting "$tmp/bogus.out"

# --- systemd-analyze security (printed, not asserted) ------------------------
if systemd-analyze --help 2>&1 | grep -q -- '--offline'; then
	systemd-analyze security --offline=yes --no-pager "$tmp/verify/sinkd.service" >"$tmp/security.out" 2>&1
	level=$(grep -a 'Overall exposure level' "$tmp/security.out")
	echo "# ${level:-no exposure level printed:}"
	[ -n "$level" ] || sed 's/^/    | /' "$tmp/security.out"
	check "systemd-analyze security --offline=yes prints an exposure level" [ -n "$level" ]
else
	echo "# systemd-analyze has no --offline: security not analysed"
fi

# --- sysusers.d --------------------------------------------------------------
sysusers=$root$sysusersdir/sinkd.conf
if command -v systemd-sysusers >/dev/null 2>&1 && systemd-sysusers --help 2>&1 | grep -q -- '--dry-run'; then
	systemd-sysusers --dry-run --root="$root" sinkd.conf >"$tmp/sysusers.out" 2>&1
	rc=$?
	sed 's/^/    | /' "$tmp/sysusers.out"
	check "systemd-sysusers --dry-run exits 0" [ $rc -eq 0 ]
	check "sysusers creates group sinkd" grep -q "^Creating group 'sinkd'" "$tmp/sysusers.out"
	check "sysusers creates user sinkd" grep -q "^Creating user 'sinkd'" "$tmp/sysusers.out"
	check "sysusers prints nothing else (no warnings)" \
		bash -c '! grep -v -E "^(Creating (group|user) .sinkd. |Would write )" "$1"' _ "$tmp/sysusers.out"
else
	echo "# no systemd-sysusers --dry-run: sysusers snippet parsed only"
fi
check "sysusers: one system user sinkd, home /var/lib/sinkd" \
	bash -c '[ "$(grep -v -E "^[[:space:]]*(#|$)" "$1")" = "u sinkd - \"sinkd LLM inference daemon\" /var/lib/sinkd" ]' _ "$sysusers"

# --- tmpfiles.d --------------------------------------------------------------
tmpfiles=$root$tmpfilesdir/sinkd.conf
check "tmpfiles: /etc/sinkd 0750 root:sinkd" \
	grep -q -E '^d[[:space:]]+/etc/sinkd[[:space:]]+0750[[:space:]]+root[[:space:]]+sinkd([[:space:]]|$)' "$tmpfiles"
check "tmpfiles: every line is 'd PATH MODE USER GROUP AGE'" \
	awk '!/^[[:space:]]*(#|$)/ && !($1 == "d" && $2 ~ /^\// && $3 ~ /^0[0-7][0-7][0-7]$/ && NF == 6) { bad = 1; print "    | " $0 } END { exit bad }' "$tmpfiles"
if [ "$(id -u)" -eq 0 ] && command -v systemd-tmpfiles >/dev/null 2>&1 && command -v systemd-sysusers >/dev/null 2>&1; then
	# As root: create the user inside the DESTDIR, then the directories there.
	mkdir -p "$root/etc"
	systemd-sysusers --root="$root" sinkd.conf >"$tmp/sysusers-real.out" 2>&1
	check "systemd-sysusers --root writes the DESTDIR's passwd" grep -q '^sinkd:' "$root/etc/passwd"
	systemd-tmpfiles --create --root="$root" sinkd.conf >"$tmp/tmpfiles.out" 2>&1
	rc=$?
	check "systemd-tmpfiles --create --root exits 0" [ $rc -eq 0 ]
	check "systemd-tmpfiles prints nothing (no warnings)" silent "$tmp/tmpfiles.out"
	gid=$(awk -F: '$1 == "sinkd" { print $3 }' "$root/etc/group")
	uid=$(awk -F: '$1 == "sinkd" { print $3 }' "$root/etc/passwd")
	check "/etc/sinkd is 750 root:sinkd" [ "$(stat -c '%a %u:%g' "$root/etc/sinkd")" = "750 0:$gid" ]
	check "/var/lib/sinkd is 750 sinkd:sinkd" [ "$(stat -c '%a %u:%g' "$root/var/lib/sinkd")" = "750 $uid:$gid" ]
else
	echo "# not root: systemd-tmpfiles --create not run (it would chown)"
fi

finish
