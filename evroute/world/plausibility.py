"""What cannot be right in a drive, said in words and dropped, never averaged in.

A logger's trace can be broken in ways that still import into numbers: two vehicles interleaved
in one file, a trip meter reset half-way, a state of charge in whole percent, a phone's position
wandering while the car is parked. Each check here names one such problem; the import
(:func:`evroute.world.drives.import_traces`) turns it into one ``warning:`` line a trip and kind,
counts the kinds in ``report.json`` (``flags``) and drops what the problem makes wrong (``dropped``):

========================  =====================================================  ==========================
kind                      when                                                   what is dropped
========================  =====================================================  ==========================
``duplicate rows``        a row repeats an earlier row exactly                   the repeats
``same time``             two different fixes of a trip at one time              the later ones
``jump``                  consecutive fixes farther apart than                   stray fixes; two long runs
                          :data:`MAX_JUMP_MPS` allows (beyond the GPS noise)     become two trips
``meter reset``           the trip meter falls faster than                       the traversals across it
                          :data:`METER_DROP_W` (no car recuperates that), or
                          to zero
``coarse energy``         the energy's resolution (a state of charge in whole    the trip's traversals
                          percent) exceeds the trip's median traversal
``too fast``              a traversal's top speed over :data:`SPEED_FACTOR`      those traversals
                          times the road's limit plus :data:`SPEED_SLACK_MPS`
``phantom loop``          a U-turn leg the car did not drive (the distance       those traversals
                          driven in it under :data:`LOOP_SHARE` of the edge)
========================  =====================================================  ==========================
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_JUMP_MPS", "JUMP_NOISE_SIGMAS", "MIN_TRACK_FIXES", "METER_DROP_W", "METER_RESET_SHARE",
           "METER_RESET_MIN_WH", "METER_RESET_OUTLIER", "SPEED_FACTOR", "SPEED_SLACK_MPS",
           "LOOP_SHARE", "FLAG_KINDS", "split_jumps", "meter_resets", "energy_quantum_wh", "too_fast", "u_turn_legs",
           "distance_driven", "phantom_loops"]

#: The fastest a car moves between two fixes (m/s, 252 km/h): a step that implies more, beyond
#: the GPS noise (:data:`JUMP_NOISE_SIGMAS`), joins two places no car links in that time: two
#: vehicles interleaved in one trip, or a stray fix.
MAX_JUMP_MPS = 70.0
#: The GPS noise a step may carry before its speed counts (in σ of ``--gps-noise``; two fixes
#: each off by 3σ, in opposite directions).
JUMP_NOISE_SIGMAS = 6.0
#: The fewest fixes a run of reachable fixes needs to be a trip of its own when a trip splits at
#: its jumps; shorter runs are stray fixes, dropped.
MIN_TRACK_FIXES = 10
#: The fastest a trip meter may fall (W): regenerative braking gives back 50–150 kW (SUMO's
#: electric car up to 151 kW on the Monaco drives; the strongest production cars about 290 kW
#: for a moment); a meter falling faster was reset (or is another vehicle's).
METER_DROP_W = 300_000.0
#: A trip meter that falls to this share of its reading or less, by at least
#: :data:`METER_RESET_MIN_WH` and :data:`METER_RESET_OUTLIER` times the median change of the ten
#: steps around it, was reset to zero, however slowly it fell (a long downhill takes a meter
#: through zero too, but step by step alike).
METER_RESET_SHARE = 0.02
METER_RESET_MIN_WH = 5.0
METER_RESET_OUTLIER = 10.0
#: A traversal's top speed beyond ``SPEED_FACTOR`` × the road's speed limit + ``SPEED_SLACK_MPS``
#: is not a car's on that road (27 m/s on a 30 km/h street, 38 m/s on a 50 km/h one, 82 m/s on a
#: motorway of 130 km/h): the positions, not the car, moved that fast.
SPEED_FACTOR = 2.0
SPEED_SLACK_MPS = 10.0
#: A leg of a U-turn (an edge, then the same road back) is supported when the distance driven
#: during it (the speeds integrated, logged or estimated from the positions) is at least this
#: share of the edge's length; a parked car's GPS jitter makes U-turn loops it never drove.
LOOP_SHARE = 0.5

#: The kinds of problem, in the order the report lists them.
FLAG_KINDS = ("file skipped", "ragged rows", "duplicate rows", "bad rows", "same time", "jump", "meter reset",
              "coarse energy", "too fast", "phantom loop")


def split_jumps(t, north, east, *, gps_noise_m: float) -> np.ndarray:
    """Runs of fixes a car could have driven: each fix joins a run whose last fix it can reach
    (at :data:`MAX_JUMP_MPS`, beyond :data:`JUMP_NOISE_SIGMAS` σ of noise), the one with the latest
    fix (then the nearest), or starts a run of its own.

    Parameters
    ----------
    t, north, east : arrays (n,)
        One trip's fixes in time order: seconds and local metres.
    gps_noise_m : float
        σ, the fixes' noise (m).

    Returns
    -------
    numpy.ndarray
        Each fix's run, 0, 1, ... in the order the runs begin (all 0 where no step jumps).
    """
    t, north, east = (np.asarray(a, dtype=np.float64) for a in (t, north, east))
    n = t.size
    labels = np.zeros(n, dtype=np.int64)
    if n < 2:
        return labels
    allowance = JUMP_NOISE_SIGMAS * float(gps_noise_m)
    step = np.hypot(np.diff(north), np.diff(east))
    if not (step > allowance + MAX_JUMP_MPS * np.diff(t)).any():
        return labels  # the common case: no step jumps
    last_t, last_n, last_e = [t[0]], [north[0]], [east[0]]  # each run's last fix
    for i in range(1, n):
        lt, ln, le = np.asarray(last_t), np.asarray(last_n), np.asarray(last_e)
        d = np.hypot(north[i] - ln, east[i] - le)
        ok = d <= allowance + MAX_JUMP_MPS * (t[i] - lt)
        if ok.any():  # the run last heard of (a run that ended long ago is not taken up again), then the nearest
            order = np.lexsort((d, -lt))
            k = int(order[ok[order]][0])
            last_t[k], last_n[k], last_e[k] = t[i], north[i], east[i]
        else:
            k = len(last_t)
            last_t.append(t[i])
            last_n.append(north[i])
            last_e.append(east[i])
        labels[i] = k
    return labels


def meter_resets(t, used, *, meter=None) -> np.ndarray:
    """The fixes at which a trip meter (energy used so far, Wh) was reset: it fell faster than
    :data:`METER_DROP_W`, or (``meter``: its readings, Wh) to :data:`METER_RESET_SHARE` of its
    reading or less, by :data:`METER_RESET_MIN_WH` or more and by :data:`METER_RESET_OUTLIER`
    times the median change of the ten steps around it or more.

    Returns
    -------
    numpy.ndarray
        Indices k (the step k−1 → k fell), increasing.
    """
    t, used = np.asarray(t, dtype=np.float64), np.asarray(used, dtype=np.float64)
    if t.size < 2:
        return np.zeros(0, dtype=np.int64)
    fall = -np.diff(used)
    reset = fall > METER_DROP_W * np.maximum(np.diff(t), 1.0) / 3600.0
    if meter is not None:
        meter = np.asarray(meter, dtype=np.float64)
        zero = (fall >= METER_RESET_MIN_WH) & (np.abs(meter[1:]) <= METER_RESET_SHARE * np.abs(meter[:-1]))
        for k in np.flatnonzero(zero & ~reset).tolist():
            around = np.abs(np.r_[fall[max(0, k - 5):k], fall[k + 1:k + 6]])
            reset[k] = around.size == 0 or fall[k] >= METER_RESET_OUTLIER * float(np.median(around))
    return np.flatnonzero(reset) + 1


def energy_quantum_wh(used) -> float:
    """The energy signal's resolution (Wh): where it mostly repeats its value and moves in equal
    steps (a state of charge in whole percent moves once in hundreds of fixes, by 1 % each time),
    the median step; infinite where it never moves over a trip of three fixes or more (a 60 kWh
    battery's whole percent is 600 Wh, more than many trips use); 0 for a signal that changes at
    most fixes or by steps of many sizes (a trip meter, an integrated power, a car that parked).

    Parameters
    ----------
    used : array (n,)
        The energy used so far at each fix (Wh).

    Returns
    -------
    float
        Wh (0: fine; inf: never moves).
    """
    used = np.asarray(used, dtype=np.float64)
    d = np.abs(np.diff(used))
    if d.size < 2:
        return 0.0
    moves = d > 1e-9 * max(1.0, float(np.abs(used).max()))
    if not moves.any():
        return float("inf")
    if moves.mean() > 0.5:
        return 0.0
    low, mid, high = np.percentile(d[moves], [10, 50, 90])
    return float(mid) if low >= 0.8 * mid and high <= 1.25 * mid else 0.0


def too_fast(v_top, limit) -> np.ndarray:
    """Which traversals' top speeds (m/s) no car reaches on their roads (limits in m/s):
    above :data:`SPEED_FACTOR` × the limit + :data:`SPEED_SLACK_MPS`.

    Returns
    -------
    numpy.ndarray
        Booleans, one per traversal.
    """
    v_top, limit = np.asarray(v_top, dtype=np.float64), np.asarray(limit, dtype=np.float64)
    return v_top > SPEED_FACTOR * limit + SPEED_SLACK_MPS


def u_turn_legs(edge, next_edge, *, u, v) -> np.ndarray:
    """Which of a trip's traversals (in order) are a leg of a U-turn: the next traversal is the
    same road back (its junctions swapped), or the one before came along it.

    Parameters
    ----------
    edge, next_edge : arrays (m,)
        The traversals' edges and the edges driven next (−1: not a complete traversal).
    u, v : arrays (E,)
        Each edge's junctions.

    Returns
    -------
    numpy.ndarray
        Booleans, one per traversal.
    """
    edge, nxt = np.asarray(edge, dtype=np.int64), np.asarray(next_edge, dtype=np.int64)
    turn = (nxt >= 0) & (u[np.maximum(nxt, 0)] == v[edge]) & (v[np.maximum(nxt, 0)] == u[edge])
    legs = turn.copy()
    follows = np.zeros(edge.size, dtype=bool)
    follows[1:] = turn[:-1] & (edge[1:] == nxt[:-1])
    return legs | follows


def distance_driven(t, speed, *, start, end) -> np.ndarray:
    """The distance driven between times ``start`` and ``end`` (arrays), the trapezoid of the
    speeds ``speed`` at the fixes' times ``t`` (linear between fixes).

    Returns
    -------
    numpy.ndarray
        Metres, one per (start, end).
    """
    t, speed = np.asarray(t, dtype=np.float64), np.asarray(speed, dtype=np.float64)
    speed = np.where(np.isfinite(speed), speed, 0.0)
    cum = np.r_[0.0, np.cumsum(0.5 * (speed[1:] + speed[:-1]) * np.diff(t))]
    return np.interp(end, t, cum) - np.interp(start, t, cum)


def phantom_loops(edge, next_edge, *, enter, seconds, t, speed, u, v, length) -> np.ndarray:
    """Which of a trip's traversals are U-turn legs the car did not drive
    (:func:`u_turn_legs`, the distance driven in them under :data:`LOOP_SHARE` of the edge).

    Parameters
    ----------
    edge, next_edge : arrays (m,)
        The trip's traversals in order: their edges and the edges driven next (−1: none).
    enter, seconds : arrays (m,)
        When each was entered and for how long (s).
    t, speed : arrays (n,)
        The trip's fixes: times (s) and speeds (m/s, logged or estimated).
    u, v, length : arrays (E,)
        The edges' junctions and lengths (m).

    Returns
    -------
    numpy.ndarray
        Booleans, one per traversal.
    """
    edge = np.asarray(edge, dtype=np.int64)
    legs = u_turn_legs(edge, next_edge, u=u, v=v)
    if not legs.any():
        return legs
    enter = np.asarray(enter, dtype=np.float64)
    driven = distance_driven(t, speed, start=enter, end=enter + np.asarray(seconds, dtype=np.float64))
    return legs & (driven < LOOP_SHARE * np.asarray(length, dtype=np.float64)[edge])
