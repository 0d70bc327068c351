#!/bin/sh
# tests/rdma/peer-serve.sh - guest B's end of tests/rdma/peer-exec.sh in the
# rig's pair mode: busybox `nc -ll -p 7000 -e sh peer-serve.sh` runs it once
# per connection with the connection as stdin and stdout.
#
# Reads one shell line and runs it in a session of its own (stdout: the
# connection; stderr: the guest's output).  The command lives as long as
# the connection: when the other side closes it (peer-exec.sh ended), a
# watcher kills the command's session; when the command ends by itself, the
# watcher goes and the connection closes, so peer-exec.sh ends too.
read -r line || exit 0
# (busybox kill takes no "--": the process group as a negative pid after the signal)
exec 4<&0 # an asynchronous command's stdin is /dev/null unless redirected
setsid sh -c "$line" </dev/null 4<&- &
pid=$!
setsid sh -c "cat >/dev/null; kill -KILL -$pid" <&4 4<&- &
watch=$!
wait "$pid"
kill -KILL "-$watch" "-$pid" 2>/dev/null
exit 0
