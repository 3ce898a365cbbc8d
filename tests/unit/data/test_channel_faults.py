"""The Channel under process death: nothing leaks, nobody else loses a message, nothing hangs.

Senders and receivers here are real processes killed with SIGKILL in the middle of a message.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

from nimbus.data.broadcast import Broadcaster
from nimbus.data.channel import ChannelLimits, Inbox, Outbox
from nimbus.data.codec import Message
from nimbus.data.frames import body_segment_prefix, new_segment_name
from nimbus.data.shm import list_segments, run_prefix
from nimbus.data.slots import SlotPool
from support import wait_for

SENDER = r"""
import socket, sys, time
import numpy as np
from nimbus.data.channel import Outbox
from nimbus.data.codec import Message
from nimbus.data.frames import new_segment_name, slot_header_frame
from nimbus.data.shm import run_prefix
from nimbus.data.slots import SlotPool, write_message
from nimbus.data.transport import LENGTH

sock, mode, count = socket.socket(fileno=int(sys.argv[1])), sys.argv[2], int(sys.argv[3])
pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=4, slot_bytes=1 << 20)
outbox = Outbox(sock=sock, pool=pool, inline_max_bytes=64)
for i in range(count):
    outbox.send(message=Message(arrays={"x": np.full(1 << 16, i % 251, np.uint8)}), tag={"i": i})
outbox.flush()
if mode == "good":
    outbox.close()
    sys.exit(0)
slot = pool.acquire(readers=(0,), on_full="block")   # a body in a slot, then half of its header
used, packed = write_message(pool=pool, slot=slot, message=Message(arrays={"x": np.zeros(1 << 16, np.uint8)}))
frame = slot_header_frame(tag={"i": 999}, pool=pool.name, slot=slot, reader=0, nbytes=used, compressed=packed)
data = LENGTH.pack(len(frame)) + frame
sock.sendall(data[:len(data) // 2])
print("mid-message", flush=True)
time.sleep(120)
"""

RECEIVER = r"""
import os, socket, sys
from nimbus.data.channel import Inbox
from nimbus.data.frames import body_segment_prefix
from nimbus.data.shm import run_prefix

inbox = Inbox()
for n, fd in enumerate(sys.argv[2:]):
    inbox.add_source(source=f"s{n}", sock=socket.socket(fileno=int(fd)),
                     segment_prefix=body_segment_prefix(prefix=run_prefix(), pid=int(sys.argv[1])))
held = []
while True:
    envelope = inbox.get()
    print(envelope.source, envelope.tag["i"], flush=True)
    held.append(envelope)   # never released: this receiver dies holding slots, mid-message
"""


def _spawn(script: str, *args: int | str, fds: tuple[int, ...]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], pass_fds=fds,
                            stdout=subprocess.PIPE, text=True)


def test_a_sender_killed_mid_message_leaks_no_segment_and_loses_no_other_senders_message() -> None:
    got: dict[str, list[int]] = {"good": [], "dying": []}
    closed: dict[str, str | None] = {}
    inbox = Inbox(on_message=lambda e: got[e.source].append((e.tag["i"], int(e.message.arrays["x"][0]))),
                  on_close=lambda source, error: closed.__setitem__(source, error and type(error).__name__))
    procs = {}
    for name, mode, count in (("good", "good", 200), ("dying", "dying", 3)):
        a, b = socket.socketpair()
        procs[name] = _spawn(SENDER, a.fileno(), mode, count, fds=(a.fileno(),))
        a.close()
        inbox.add_source(source=name, sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(),
                                                                               pid=procs[name].pid))
    assert procs["dying"].stdout.readline().strip() == "mid-message"
    os.kill(procs["dying"].pid, signal.SIGKILL)
    assert procs["good"].wait(timeout=60) == 0 and procs["dying"].wait(timeout=10) == -signal.SIGKILL
    assert wait_for(lambda: len(closed) == 2, timeout_s=10, interval_s=0.01)
    assert got["good"] == [(i, i % 251) for i in range(200)]  # every message of the other sender, intact
    assert got["dying"] == [(i, i) for i in range(3)]  # the complete ones; the half message is discarded
    inbox.close()
    assert list_segments(prefix=run_prefix()) == []  # the dead sender's pool was swept by the Inbox


def test_a_receiver_killed_mid_message_leaks_nothing_and_its_senders_do_not_hang() -> None:
    errors: list[tuple[int, str]] = []
    pairs = [socket.socketpair() for _ in range(2)]
    receiver = _spawn(RECEIVER, os.getpid(), *(b.fileno() for _, b in pairs), fds=tuple(b.fileno() for _, b in pairs))
    outboxes = []
    for a, b in pairs:
        b.close()
        pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=2, slot_bytes=1 << 20)
        outboxes.append(Outbox(sock=a, pool=pool, inline_max_bytes=64, limits=ChannelLimits(on_full="block"),
                               on_error=lambda tag, exc: errors.append((tag["i"], type(exc).__name__))))
    for i in range(2):  # both slots of each pool end up pinned by the receiver
        for outbox in outboxes:
            outbox.send(message=Message(arrays={"x": np.ones(1 << 16, np.uint8)}), tag={"i": i})
    assert [receiver.stdout.readline() for _ in range(4)]
    os.kill(receiver.pid, signal.SIGKILL)
    receiver.wait(timeout=10)
    for i in range(2, 5):  # the pools are full: without the dead-peer check these would block forever
        for outbox in outboxes:
            outbox.send(message=Message(arrays={"x": np.ones(1 << 16, np.uint8)}), tag={"i": i})
    for outbox in outboxes:
        assert outbox.flush(timeout_s=10)
        outbox.close(timeout_s=2)
    assert sorted(errors)[:2] == [(2, "BrokenPipeError")] * 2  # reported, never silently kept
    assert list_segments(prefix=run_prefix()) == []
    for a, _ in pairs:
        a.close()


def test_a_broadcast_reader_killed_mid_message_is_reclaimed_and_the_others_get_everything() -> None:
    pairs = [socket.socketpair() for _ in range(3)]
    received: list[list[int]] = [[], [], []]
    inboxes = []
    for reader, (_, b) in enumerate(pairs[::2]):
        index = 2 * reader
        inbox = Inbox(on_message=lambda e, index=index: received[index].append(e.tag["version"]))
        inbox.add_source(source="caster", sock=b, segment_prefix=body_segment_prefix(prefix=run_prefix(),
                                                                                     pid=os.getpid()))
        inboxes.append(inbox)
    holder = _spawn(RECEIVER, os.getpid(), pairs[1][1].fileno(), fds=(pairs[1][1].fileno(),))
    pairs[1][1].close()
    pool = SlotPool.create(name=new_segment_name(prefix=run_prefix()), num_slots=2, slot_bytes=1 << 20, max_readers=3)
    caster = Broadcaster(socks=[a for a, _ in pairs], pool=pool, on_full="block", block_timeout_s=30)
    weights = np.ones(1 << 16, np.float32)
    for version in range(2):
        assert caster.publish(message=Message(arrays={"w": weights}), tag={"version": version, "i": version}) == 3
    assert [holder.stdout.readline() for _ in range(2)]  # reader 1 holds both slots now
    killer = threading.Timer(0.3, lambda: os.kill(holder.pid, signal.SIGKILL))
    killer.start()
    started = time.monotonic()
    for version in range(2, 10):  # blocks until the dead reader is noticed and its slots reclaimed
        assert caster.publish(message=Message(arrays={"w": weights}), tag={"version": version, "i": version}) == 2
    assert time.monotonic() - started < 20 and caster.alive == (0, 2)
    assert wait_for(lambda: received[0] == received[2] == list(range(10)), timeout_s=10, interval_s=0.01)
    holder.wait(timeout=10)
    assert pool.stats().reclaimed == 2
    caster.close()
    for inbox in inboxes:
        inbox.close()
    assert list_segments(prefix=run_prefix()) == []
    for a, _ in pairs:
        a.close()
