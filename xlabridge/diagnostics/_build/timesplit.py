"""Where one process's observed wall time went, as exclusive shares (nested intervals counted
once, in the innermost share).

From its events:

* **imports**: importing torch_xla, transformers and the other heavy packages while observed
  (``imported`` intervals, merged: a nested import counts once), wherever it happened (Dynamo
  imports inductor lazily, inside its first compilation);
* **tracing**: Dynamo's compilations (``dynamo_compile`` intervals: tracing plus the backend's
  compile call, AOTAutograd included) and the bridge's extractions (``partitioned``
  intervals: partitioning and lazy tracing; TorchTPU's split compiles, inside Dynamo's), merged,
  less the imports and XLA compilations inside them;
* **backend compile**: a backend's own compile of each graph AOTAutograd hands it (``backend_compile``
  intervals: inductor's code generation, C++/Triton compile, autotuning), less imports inside;
* **XLA compilation**: every ``xla_compile`` event (inside extractions, inside later calls,
  inside Dynamo, and the rest of torch_xla's ``CompileTime`` outside compiled graphs: lazily
  traced graphs compiled at a sync or a host read);
* **execution**: the calls of compiled graphs (``graph_called`` after the extraction, summed
  ``graph_calls``), less the XLA compilations, CPU-fallback work and imports inside them; waiting
  for the device inside a call counts here;
* **lazy**: ``torch_xla.sync()`` and ``torch_xla.compile`` regions outside Dynamo's
  compilations, the bridge's extractions and the compiled graphs' calls (``sync`` intervals),
  less the XLA compilations inside them: the lazily traced work of a step (a step traced in a
  ``torch_xla.compile`` region, an optimizer step, a loss outside ``torch.compile``) running;
* **eager**: ops run in torch_xla's eager mode (each its own XLA computation, launched at once
  and run on torch_xla's execution thread): the execution spans torch_xla kept a sample of,
  outside every interval above and the eager ops' own compilations (those count in XLA
  compilation); executions past its last 1024 samples add their seconds in the same proportion;
* **transfers**: host-device transfers outside the compiled graphs' calls (torch_xla's transfer
  times over the whole observation, less those of the measured calls and, for the calls only
  summed, the last measured call's per call);
* **CPU-fallback work**: time in the CPU nodes of partitioned graphs during their calls;
* **process group**: setting up ``torch.distributed`` (``dist_setup`` intervals: the rendezvous with
  the other ranks and the backend's connections), less the shares above inside them;
* **collective wait**: the host waiting in collectives (``collective_waits``: blocking
  ``torch.distributed`` calls, ``Work.wait()``, DDP's collectives at construction, a backward
  pass's final callbacks where DDP's reducer waits for its all-reduce), outside the shares above;
  summed calls past the placed ones count in full;
* **waiting for ranks**: a launcher's agent running its ranks (``ranks_waited``), less imports;
* **exit**: from the return of the main module (``exiting``) to the end, outside the shares above
  (threads joined, ``atexit`` handlers: inductor's compile-worker pool shutting down, an
  ``exit_work`` event, is named apart as ``compile_workers_exit``); where the process that waited
  for it saw it exit (``process_exit``), the end is that exit, less the observer's own work after
  the observation (an ``exit_work`` of ``xlabridge``): the interpreter's teardown counts too;
* **other**: the rest (Python between compiled graphs, lazy tensor tracing, a host read's
  execution of pending lazy work, building a model on the host).

A process without a ``process_end`` (it died, or still runs) is split up to its last event; its
end-of-run totals (transfers, compilations outside compiled graphs) are then unknown, and the
compilations its syncs saw stand for the latter. Later calls summed several to a span (a long
run's) are counted in full, but only single calls' spans tell a sync inside a call from one
between calls: a site's later syncs, summed, count as lazy.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics.report import TimeSplit

Interval = tuple[float, float]


def decoded(spans: Sequence[Sequence[float]]) -> list[tuple[float, float, int, float]]:
    """An event's ``spans`` as ``(start, seconds, calls, end)`` each: ``[start, seconds]`` is one call,
    ``[start, seconds, calls, end]`` several in a row (``seconds`` their total)."""
    out = []
    for span in spans:
        if len(span) >= 4:
            out.append((float(span[0]), float(span[1]), int(span[2]), float(span[3])))
        elif len(span) >= 2:
            out.append((float(span[0]), float(span[1]), 1, float(span[0]) + float(span[1])))
    return out


OBSERVER = ev.ExitWork.OBSERVER


def _observer_work(event: ev.Event) -> bool:
    return isinstance(event, ev.ExitWork) and event.what == OBSERVER


def last_t(events: Sequence[ev.Event]) -> float:
    """The latest time a process's events show it alive: their ``t``, and the ends of summed calls
    (a ``process_exit`` is written by another process, after this one's end; the observer's own work
    after the observation is not the process's)."""
    latest = max((e.t for e in events if not isinstance(e, ev.ProcessExit) and not _observer_work(e)), default=0.0)
    for event in events:
        if isinstance(event, (ev.GraphCalls, ev.SyncCalls)):
            latest = max([latest, *(end for _, _, _, end in decoded(event.spans))])
    return latest


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """``intervals`` merged into disjoint ones, in order."""
    out: list[Interval] = []
    for start, stop in sorted(intervals):
        if out and start <= out[-1][1]:
            if stop > out[-1][1]:
                out[-1] = (out[-1][0], stop)
        else:
            out.append((start, stop))
    return out


def length(intervals: Iterable[Interval]) -> float:
    """Seconds covered by ``intervals`` (overlaps once)."""
    return sum(stop - start for start, stop in merged(intervals))


def outside(intervals: Iterable[Interval], holes: Iterable[Interval]) -> float:
    """Seconds covered by ``intervals`` and by none of ``holes`` (both merged, then swept once)."""
    covered, cut = merged(intervals), merged(holes)
    inside, j = 0.0, 0
    for start, stop in covered:
        while j < len(cut) and cut[j][1] <= start:
            j += 1
        k = j
        while k < len(cut) and cut[k][0] < stop:
            inside += min(stop, cut[k][1]) - max(start, cut[k][0])
            k += 1
    return length(covered) - inside


class Holes:
    """Intervals merged once, to ask of many single intervals how much of each lies outside them."""

    def __init__(self, intervals: Iterable[Interval]) -> None:
        self.cut = merged(intervals)
        self.starts = [start for start, _ in self.cut]

    def outside(self, start: float, stop: float) -> float:
        """Seconds of ``[start, stop]`` in none of the intervals."""
        inside = 0.0
        k = max(bisect.bisect_right(self.starts, start) - 1, 0)
        while k < len(self.cut) and self.cut[k][0] < stop:
            inside += max(0.0, min(stop, self.cut[k][1]) - max(start, self.cut[k][0]))
            k += 1
        return (stop - start) - inside


def outermost(syncs: Sequence[ev.Sync]) -> list[ev.Sync]:
    """The syncs and compile regions not inside another (a region's own sync is inside it)."""
    out: list[ev.Sync] = []
    reach = float("-inf")
    for sync in sorted(syncs, key=lambda s: (s.start, -s.t)):
        if sync.t > reach:
            out.append(sync)
            reach = sync.t
    return out


def split(events: Sequence[ev.Event]) -> TimeSplit | None:
    """The time split of one process's events, to its ``process_end`` or, for a process that has
    none (it died, or still runs), to its last event (``None`` without a ``process_start``, and for
    a process read from torch's structured trace, which holds its compilations but not its wall time)."""
    end = next((e for e in reversed(events) if isinstance(e, ev.ProcessEnd)), None)
    ended = end is not None
    if end is None:
        start = next((e for e in events if isinstance(e, ev.ProcessStart)), None)
        if start is None or any(isinstance(e, ev.TraceRead) for e in events):
            return None
        end = ev.ProcessEnd(t=max(last_t(events), start.t), pid=start.pid, start=start.t)
    compiles = [e for e in events if isinstance(e, ev.XlaCompile)]

    def compiled(phase: ev.XlaPhase) -> float:
        return sum(e.seconds for e in compiles if e.phase == phase)

    def spans(kind: type[ev.Event]) -> list[Interval]:
        return [(e.start, e.t) for e in events if isinstance(e, kind)]

    imports = spans(ev.Imported)
    backend = spans(ev.BackendCompile)
    compiling = spans(ev.DynamoCompile)
    extracting = spans(ev.Partitioned)
    called = [e for e in events if isinstance(e, ev.GraphCalled)]
    summed = [e for e in events if isinstance(e, ev.GraphCalls)]
    # the summed calls placed one by one; where several are summed into one span, the time between
    # them is not theirs: a steady step's sync or eager op runs between two calls, never inside one
    call_spans = [(e.start, e.t) for e in called] + [
        (s, s + d) for e in summed for s, d, n, _ in decoded(e.spans) if n == 1]
    # merged: TorchTPU compiles a graph's partitions inside Dynamo's compilation of its frame (torch_xla's
    # bridge extracts at the first call, outside it); nested intervals count once
    tracing = (outside(compiling + extracting, imports + backend) - compiled(ev.XlaPhase.DYNAMO)
               - compiled(ev.XlaPhase.EXTRACTION))
    backend_compile = outside(backend, imports)
    other_calls = [e for e in events if isinstance(e, ev.CompiledCalls)]
    placed = [(s, s + d) for e in other_calls for s, d in e.spans]
    # on CUDA, the GPU's spans too: the host waiting on compiled work (its own loss.item()) is their execution
    placed += [(s, s + d) for e in other_calls for s, d in e.device_spans]
    unplaced = sum(max(e.seconds - sum(d for _, d in e.spans), 0.0) for e in other_calls)
    calls = sum(e.t - e.start for e in called) + sum(e.seconds for e in summed)
    cpu = sum(e.cpu_fallback_seconds for e in called) + sum(e.cpu_fallback_seconds for e in summed)
    imported_in_calls = length(call_spans) - outside(call_spans, imports)  # a first call's lazy imports
    execution = calls - compiled(ev.XlaPhase.CALL) - cpu - imported_in_calls
    execution += outside(placed, imports + compiling + extracting + backend) + unplaced
    inside_compiled = compiling + extracting + call_spans + placed + backend
    syncs = [e for e in events if isinstance(e, ev.Sync)]
    holes = Holes(inside_compiled)
    own_syncs = [s for s in outermost(syncs) if holes.outside(s.start, s.t) > 0.5 * (s.t - s.start)]
    lazy = outside([(s.start, s.t) for s in syncs], inside_compiled + imports) - sum(s.compile_seconds for s in own_syncs)
    # a site's later syncs, summed, are a training loop's step ends: outside compiled graphs (the
    # bridge's own syncs, at extractions, are recorded one by one)
    sync_sums = [e for e in events if isinstance(e, ev.SyncCalls)]
    lazy += sum(e.seconds - e.compile_seconds for e in sync_sums)
    sync_spans = [(s.start, s.t) for s in syncs] + [
        (s, s + d) for e in sync_sums for s, d, n, _ in decoded(e.spans) if n == 1]
    transfers = _transfers(events, called, summed)
    eager = _eager(events, inside_compiled + imports + sync_spans)
    elsewhere = imports + inside_compiled + sync_spans
    setups = spans(ev.DistSetup)
    process_group = outside(setups, elsewhere)
    waits = [e for e in events if isinstance(e, ev.CollectiveWaits)]
    waited = [(s, s + d) for e in waits for s, d, n, _ in decoded(e.spans) if n == 1]
    unplaced_waits = sum(max(e.seconds - sum(d for _, d, n, _ in decoded(e.spans) if n == 1), 0.0) for e in waits)
    collective_wait = outside(waited, elsewhere + setups) + unplaced_waits
    waiting_for_ranks = outside(spans(ev.RanksWaited), imports)
    finish = _finish(events, end) if ended else end.t
    exiting = [(e.t, finish) for e in events if isinstance(e, ev.Exiting) and e.t < finish]
    pools = [e for e in events if isinstance(e, ev.ExitWork) and e.what != OBSERVER]
    shut = [(e.start, e.t) for e in pools]
    exit_seconds = outside(exiting + shut, elsewhere + setups + waited)
    wall = finish - end.start
    xla_compile = sum(e.seconds for e in compiles)
    if not any(e.phase == ev.XlaPhase.OUTSIDE for e in compiles):
        # no end-of-run total of torch_xla's compile time (a process that died, or still runs): the
        # syncs' own compilations are all that is known of the compilations outside compiled graphs
        xla_compile += sum(s.compile_seconds for s in own_syncs) + sum(e.compile_seconds for e in sync_sums)
    shares = dict(imports=length(imports), tracing=tracing, backend_compile=backend_compile, xla_compile=xla_compile,
                  execution=execution, lazy=max(lazy, 0.0), eager=eager, transfers=transfers, cpu_fallback=cpu,
                  process_group=process_group, collective_wait=collective_wait, waiting_for_ranks=waiting_for_ranks,
                  exit=exit_seconds)
    return TimeSplit(pid=end.pid, wall=wall, other=wall - sum(shares.values()),
                     compile_workers_exit=outside(shut, elsewhere + setups + waited), **shares)


def _finish(events: Sequence[ev.Event], end: ev.ProcessEnd) -> float:
    """The end of the process's time: its observation's end, or, for a process that ended observed
    (an ``exit`` ending) and whose exit the process that waited for it saw, that exit less the
    observer's own work after the observation."""
    exited = next((e for e in reversed(events) if isinstance(e, ev.ProcessExit)), None)
    if exited is None or end.ending != ev.Ending.EXIT or exited.t <= end.t:
        return end.t
    if not any(_observer_work(e) for e in events):
        return end.t  # a log that does not time the observer's own end work cannot tell the teardown from it
    own = sum(e.t - e.start for e in events if _observer_work(e))
    return max(end.t, exited.t - own)


def _eager(events: Sequence[ev.Event], elsewhere: list[Interval]) -> float:
    """Seconds of eager ops' executions outside ``elsewhere`` and their own compilations."""
    total = 0.0
    for ops in (e for e in events if isinstance(e, ev.EagerOps)):
        placed = [(start, start + seconds) for start, seconds in ops.spans]
        sampled = sum(seconds for _, seconds in ops.spans)
        compiling = [(start, start + seconds) for start, seconds in ops.compile_spans]
        own = outside(placed, elsewhere + compiling)
        unsampled = max(ops.execute_seconds - sampled, 0.0)
        total += own + (unsampled * own / sampled if sampled > 0 else 0.0)
    return total


def _transfers(events: Sequence[ev.Event], called: Sequence[ev.GraphCalled], summed: Sequence[ev.GraphCalls]) -> float:
    total = sum(e.seconds for e in events if isinstance(e, ev.Transfer))
    inside = sum(c.transfer_seconds for c in called)
    last = {c.graph: c.transfer_seconds for c in sorted(called, key=lambda c: c.call)}
    inside += sum(last.get(s.graph, 0.0) * s.calls for s in summed)
    return max(total - inside, 0.0)
