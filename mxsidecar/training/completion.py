"""The completion thread: descriptors handed to the sidecar in call order, once their
data is in place.

The thread takes items strictly in ``seq`` order.  For an item whose copy is still
pending on MXNet's engine it waits (MXNet releases the GIL while it does), and only
then packs the descriptor and sends it, so the sidecar never reads a span before its
bytes are there and the file's order is the order of the calls, however fast or slow
each value was to compute (invariant 4).  In a worker process there is no training
thread to spare: items are handed over in the caller instead (``workers.py``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..wire.descriptors import SCALAR_ENTRY, SCALARS_OP, Kind, Op, pack_descriptor
from ..wire.framing import ChannelClosed

__all__ = ["STOP", "CompletionThread", "skip_descriptor"]

MAX_BATCH = 512  # frames per sendall; bounds the latency of the first one in a burst
# After waking for the first item of a burst, the thread sleeps this long before it
# drains the queue.  Every time this thread takes the GIL while the training thread is
# inside one of MXNet's ctypes calls (each releases the GIL), the training thread must
# wait to get it back: a thread switch, tens of microseconds on a busy 2-core box.
# Waking once per burst instead of once per item keeps add_* at its own cost; the
# price is up to this much extra latency before values reach the sidecar.
BATCH_DELAY = 0.002

# ... but not when the last batch held this many items: a sustained burst (a caller
# blocked on a full queue, refilling it at each progress report), where the delay
# would only leave the sidecar idle while the caller waits.
BURST_ITEMS = 64

# Values per SCALARS frame, at most.  The sidecar reports progress after each frame,
# and each report costs the training process a wake-up of its receiver thread and,
# under a sustained burst (a full queue, on_full='block'), of the blocked caller: with
# 128 values a frame that was ~1 us of the trainer's CPU per value (3.8 us against
# 2.5 us at 512 over 10^6 scalars), and 215k against 279k scalars/s end to end in one
# alternating run (perf/README.md, bench_throughput.py).  The price: a sidecar that dies
# in the middle of a frame may have written up to a frame's values it never reported,
# which the trainer then counts lost (invariant 8 counts what was not reported done).
# The pipeline caps a frame at half its max_queue (``frame_values``), so that a blocked
# caller refills one half while the sidecar writes the other.
SCALARS_PER_FRAME = 512

STOP = ("stop",)  # sentinel: the completion thread exits after what precedes it


class CompletionThread(threading.Thread):
    """Sends descriptors in the order they were logged, once their data is in place.

    Items are tuples ``(op, seq, kind, tag, step, wall_time, run, number, text,
    offset, nbytes, dtype, shape, options, pending)`` where ``pending`` is None or a
    callable that returns once the span holds the value (or raises if the value could
    not be computed: the item is then sent as SKIP, with the reason).
    """

    def __init__(
        self,
        send: Callable[[list[bytes], int], None],
        on_failure: Callable[[BaseException], None],
        frame_values: int = SCALARS_PER_FRAME,
    ) -> None:
        super().__init__(name="mxsidecar-completion", daemon=True)
        self._send = send
        self.frame_values = frame_values
        self._on_failure = on_failure
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.put = self.queue.put  # the training thread's whole cost of a hand-off
        # True while waiting for an engine copy: close() names MXNet's engine, not the
        # sidecar, when it gives up on a value that was never computed.
        self.waiting_for_engine = False

    def run(self) -> None:
        """``send(payloads, last_seq)`` gets the frames of a batch and the batch's last
        seq, control descriptors included.

        Consecutive float scalars (the kind logged by the thousand: no span, no text,
        no options) go as one SCALARS frame (``wire/descriptors.py``): one struct pack
        per value here, and one frame for the sidecar to walk, instead of a framed
        descriptor each.  This thread holds the GIL while it packs, and the training
        thread wants it back, so the per-value cost here is the caller's cost too.
        """
        q = self.queue
        payloads: list[bytes] = []
        entries: list[bytes] = []  # the SCALARS frame being built, in seq order
        last = [0]
        pack_entry = SCALAR_ENTRY.pack
        previous = 0  # items in the last batch
        item_op, scalar_kind = int(Op.ITEM), int(Kind.SCALAR)
        per_frame = self.frame_values

        def send() -> None:
            if entries:
                payloads.append(SCALARS_OP + b"".join(entries))
                entries.clear()
            if payloads:
                self._send(payloads[:], last[0])
                payloads.clear()

        try:
            while True:
                batch = [q.get()]
                # FLUSH, CLOSE, STATS and STOP have a caller waiting on them and end a
                # burst rather than start one: no reason to wait for company.
                if batch[0] is not STOP and batch[0][0] == Op.ITEM and previous < BURST_ITEMS:
                    time.sleep(BATCH_DELAY)
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(q.get_nowait())
                    except queue.Empty:
                        break
                for item in batch:
                    if item is STOP:
                        send()
                        return
                    op, seq, kind, tag, step, wall, run, number, text, _, nbytes, _, _, options, pending = item
                    if kind == scalar_kind and op == item_op and pending is None and not (nbytes or text or options):
                        tag_b = tag.encode()
                        run_b = run.encode()
                        entries.append(pack_entry(seq, step, wall, number, len(tag_b), len(run_b)) + tag_b + run_b)
                        last[0] = seq
                        if len(entries) >= per_frame:
                            payloads.append(SCALARS_OP + b"".join(entries))
                            entries.clear()
                        continue
                    if entries:  # the scalars before this item go first: order is seq order
                        payloads.append(SCALARS_OP + b"".join(entries))
                        entries.clear()
                    if pending is not None:
                        send()  # let the sidecar work while we wait on the engine
                        self.waiting_for_engine = True
                        try:
                            pending()
                        except Exception as exc:
                            payloads.append(skip_descriptor(item, exc))
                            last[0] = seq
                            continue
                        finally:
                            self.waiting_for_engine = False
                    payloads.append(pack_descriptor(*item[:-1]))
                    last[0] = seq
                send()
                previous = len(batch)
                # Each item's tuple (and numpy views it may pin) goes now, not at the next burst.
                del batch, item, pending
        except ChannelClosed:
            # The sidecar is gone for good (the pipeline did not restart it): the
            # receiver thread explains why, and what is still queued is lost with it.
            pass
        except BaseException as exc:
            # A bug on our side must not leave callers waiting on a thread that is gone.
            self._on_failure(exc)


def skip_descriptor(item: tuple[Any, ...], exc: BaseException) -> bytes:
    _op, seq, kind, tag = item[:4]
    return pack_descriptor(Op.SKIP, seq, kind, tag, text=f"{type(exc).__name__}: {exc}")
