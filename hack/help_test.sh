#!/usr/bin/env bash
# hack/help_test.sh PROGRAM...: every program and script a user or developer runs answers
# --help: exit 0, within 10 s, without doing its work, with "usage" (any case) on stdout or, for
# a script whose help is its header comment, at least three lines there. A program that
# ignored --help would start training, a benchmark or a cluster build instead: the time limit
# and the empty or usage-less output catch that. Run by ctest as help_test (CMakeLists.txt).
set -uo pipefail
fail=0 n=0
for p in "$@"; do
    n=$((n + 1))
    out=$(timeout 10 "$p" --help </dev/null 2>/dev/null)
    rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ "$rc" != 0 ]; then
        echo "FAIL $p --help: exit $rc (want 0)"; fail=1
    elif ! grep -qi usage <<<"$out" && { [[ $p != *.sh ]] || [ "$lines" -lt 3 ]; }; then
        echo "FAIL $p --help: no usage on stdout: $(head -c 200 <<<"$out")"; fail=1
    else
        echo "ok   $p --help ($lines lines)"
    fi
done
[ $fail = 0 ] && echo "help_test: all $n answer --help" || echo "help_test: FAILED"
exit $fail
