# cli_testlib.sh - shell helpers for tests that run the worker's binaries and check their exit
# codes and messages (worker_cli_test.sh, predict_test.sh). Source it after setting `tmp` (a
# fresh directory); `fail` ends 1 when a check failed.
fail=0
# check NAME WANT COMMAND...: runs COMMAND (stdout to $tmp/out, stderr to $tmp/err) and checks
# that it exits WANT
check() {
    local name=$1 want=$2 got=0
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL $name: exit $got, want $want"; sed 's/^/  /' "$tmp/err" | tail -5; fail=1
    else
        echo "ok   $name"
    fi
}
# says NAME TEXT: the last check's stderr holds TEXT (a fixed string)
says() {
    grep -qF -- "$2" "$tmp/err" ||
        { echo "FAIL $1: stderr lacks \"$2\""; sed 's/^/  /' "$tmp/err" | tail -3; fail=1; }
}
# serve_start PREDICT MODEL NAME: starts PREDICT's server for MODEL as NAME on a free loopback
# port, waits until it listens; sets srv (its pid: kill it, and clear srv, when done) and port
serve_start() {
    "$1" -m "$2" --serve 0 --bind 127.0.0.1 --name "$3" 2>"$tmp/serve.err" &
    srv=$!
    for _ in $(seq 100); do grep -q "serving $3 on" "$tmp/serve.err" && break; sleep 0.1; done
    port=$(sed -n "s/.*serving $3 on 127.0.0.1:\([0-9]*\):.*/\1/p" "$tmp/serve.err")
}
