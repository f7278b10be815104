#!/bin/bash
# Container entry: make sure Open vSwitch is reachable, then exec `evio run`.
#
#   evio-entrypoint [evio run options]   ->  evio run --config "$EVIO_CONFIG" [options]
#   evio-entrypoint COMMAND [ARGS]       ->  COMMAND ARGS (e.g. evio config check /etc/evio/config.json)
#
# EVIO_OVS: "host"      use the ovsdb-server/ovs-vswitchd whose sockets are mounted at /run/openvswitch
#                       (run with --pid host, so evio can see vswitchd's pidfile process);
#           "container" start a private ovsdb-server + ovs-vswitchd in this container;
#           "auto"      (default) host if an OVSDB answers on /run/openvswitch/db.sock, else container.
set -euo pipefail

config=${EVIO_CONFIG:-/etc/evio/config.json}
mode=${EVIO_OVS:-auto}
rundir=${OVS_RUNDIR:-/run/openvswitch}  # where OVS tools look, as they do

if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

ovsdb_answers() {
    [ -S "$rundir/db.sock" ] && ovs-vsctl --timeout=2 show > /dev/null 2>&1
}

start_ovs() {
    local db=${OVS_DBDIR:-/var/lib/openvswitch}/conf.db
    mkdir -p "$rundir" "$(dirname "$db")" "${OVS_LOGDIR:-/var/log/openvswitch}"
    [ -e "$db" ] || ovsdb-tool create "$db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server "$db" --remote="punix:$rundir/db.sock" --pidfile --detach --no-chdir \
        --log-file -vconsole:off
    ovs-vsctl --no-wait init
    # The userspace datapath needs this before vswitchd starts (evio raises it otherwise too).
    ovs-vsctl --no-wait set Open_vSwitch . other_config:userspace-tso-enable=true
    ovs-vswitchd "unix:$rundir/db.sock" --pidfile --detach --no-chdir --log-file -vconsole:off
    echo "evio-entrypoint: started Open vSwitch in the container" >&2
}

case "$mode" in
    host)
        if ! ovsdb_answers; then
            echo "evio-entrypoint: EVIO_OVS=host but no OVSDB answers on $rundir/db.sock (mount the host's $rundir)" >&2
            exit 3
        fi ;;
    container) start_ovs ;;
    auto) ovsdb_answers || start_ovs ;;
    *)
        echo "evio-entrypoint: EVIO_OVS must be auto, host or container, not '$mode'" >&2
        exit 2 ;;
esac

# As config/evio.service: glibc's arena per thread (os-ken's, the side loop's, the executor's)
# holds memory the daemon never gives back. The daemon's alone, not Open vSwitch's.
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-2} exec evio run --config "$config" "$@"
