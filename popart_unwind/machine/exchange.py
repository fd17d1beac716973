"""Exchange accounting on tile arrays: what tiles must receive when they read elements held
elsewhere, and the element maps behind it (broadcast reads, matmul blocks).

Every layout rule's exchange and the machine's own matmul accounting are written with these,
so one definition says what a received element and a region are: each (tile, element) pair
is received once, and a tile's regions are its maximal runs of consecutive source elements
coming from one tile (each run costs exchange code).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from math import prod

import numpy as np

from popart_unwind.errors import TargetError
from popart_unwind.machine import count_memo, hooks
from popart_unwind.machine.interface import ExchangeNeed, MatmulPartition
from popart_unwind.shapes import broadcast_projections

#: Up to this many possible (tile, element) pairs, counting per pair marks or counts a table
#: (one pass) rather than sorting: a broadcast bias read by 1472 tiles has about a million; a
#: gather from a real embedding table has billions and sorts.
DENSE_PAIRS_MAX = 1 << 26
#: Elements a same-shape read compares at a time (a few MB of masks and of the 64-bit ids
#: ``np.bincount`` widens a chunk's tiles to: 4 M elements took 50 MB at once).
SAME_SHAPE_CHUNK = 1 << 20


def read_need(reader_tiles: np.ndarray, source_index: np.ndarray | None,
              source_tiles: np.ndarray, element_bytes: int, num_tiles: int,
              distinct: bool = True) -> ExchangeNeed:
    """What tiles must receive when element k is computed on ``reader_tiles[k]`` from
    source element ``source_index[k]`` held on ``source_tiles[source_index[k]]``.

    ``source_index=None`` means element k reads source element k (a same-shape operand, or a
    copy between two layouts of one tensor: no index array to build). ``distinct=False``
    promises that no pair repeats and that ``source_index`` ascends.
    """
    readers = _ids(reader_tiles)
    held = _ids(source_tiles)
    if source_index is None:
        return _same_shape_need(readers, held, element_bytes, num_tiles)
    index = np.asarray(source_index).reshape(-1).astype(np.int64, copy=False)
    remote = held[index] != readers
    tile, element = readers[remote], index[remote]
    if not tile.size:
        return ExchangeNeed.none(num_tiles)
    if distinct:
        tile, element = _distinct_pairs(tile, element, held.size)
    else:
        order = np.argsort(_narrow(tile), kind="stable")
        tile, element = tile[order], element[order]
    return _sorted_pairs_need(tile, element, held, element_bytes, num_tiles)


def remembered_need(question: tuple, arrays: tuple[np.ndarray, ...],
                    make: Callable[[], ExchangeNeed]) -> ExchangeNeed:
    """``make()``, or inside a cost walk the answer it gave to the same question about
    equal arrays (``count_memo.CountMemo.remembered``), as a need of its own."""
    memo = count_memo.active()
    if memo is None:
        return make()
    need = memo.remembered(question, arrays, make)
    return ExchangeNeed(need.received_bytes.copy(), need.regions.copy())


def _sorted_pairs_need(tile: np.ndarray, element: np.ndarray, held: np.ndarray,
                       element_bytes: int, num_tiles: int) -> ExchangeNeed:
    """``read_need`` from its distinct remote (tile, element) pairs, sorted by tile then
    element: each is received once; a region starts where the tile, the run of
    consecutive elements or their source tile changes."""
    source = held[element]
    starts = np.ones(tile.size, dtype=bool)
    starts[1:] = ((tile[1:] != tile[:-1]) | (element[1:] != element[:-1] + 1)
                  | (source[1:] != source[:-1]))
    received = np.bincount(tile, minlength=num_tiles)[:num_tiles] * element_bytes
    regions = np.bincount(tile[starts], minlength=num_tiles)[:num_tiles]
    return ExchangeNeed(received.astype(np.int64), regions.astype(np.int64))


#: Reads of each element up to which ``broadcast_read_need`` compares rows pairwise.
ROW_READS_MAX = 64
#: Elements of the [sources, reads, reads] comparisons it makes at a time.
ROW_PAIRS_BLOCK = 1 << 22


def broadcast_read_need(reader_tiles: np.ndarray, full_shape: tuple[int, ...],
                        small_shape: tuple[int, ...], source_tiles: np.ndarray,
                        element_bytes: int, num_tiles: int) -> ExchangeNeed:
    """``read_need`` of a numpy-broadcast operand of ``small_shape`` laid out as
    ``source_tiles``, read by a result of ``full_shape`` laid out as ``reader_tiles``.

    When each element has few readers (``ROW_READS_MAX``) and the (tile, element) pairs
    are too many for ``read_need``'s one table (an attention mask read by each head), it
    is counted row by row (``broadcast_rows``): a tile receives an element once when some
    of its reads lie there and the element does not, and the element starts a region
    unless the tile also receives the element before it from the same tile. The same
    figures as ``read_need``'s sort of every pair (a test holds them equal). Inside a cost
    walk a question asked before about equal layouts is answered again (``remembered_need``)."""
    full_shape, small_shape = tuple(full_shape), tuple(small_shape)
    readers, held = _ids(reader_tiles), _ids(source_tiles)
    memo = count_memo.active()
    if memo is None:
        return _broadcast_read_need(readers, None, full_shape, small_shape, held,
                                    element_bytes, num_tiles)
    readers_key = memo.value_key(readers)
    need = memo.remembered_key(
        (("broadcast", full_shape, small_shape, element_bytes, num_tiles), readers_key,
         memo.value_key(held)),
        lambda: _broadcast_read_need(readers, readers_key, full_shape, small_shape, held,
                                     element_bytes, num_tiles))
    return ExchangeNeed(need.received_bytes.copy(), need.regions.copy())


def _broadcast_read_need(readers: np.ndarray, readers_key: tuple | None,
                         full_shape: tuple[int, ...], small_shape: tuple[int, ...],
                         held: np.ndarray, element_bytes: int,
                         num_tiles: int) -> ExchangeNeed:
    """``broadcast_read_need`` of flat tile ids, worked out (``readers_key``: the readers'
    ``value_key`` inside a cost walk, else None)."""
    sources = prod(small_shape)
    rows = None
    if sources * num_tiles > DENSE_PAIRS_MAX:
        rows = broadcast_rows(readers, full_shape, small_shape)
    elif (need := _table_broadcast_need(readers, readers_key, full_shape, small_shape, held,
                                        element_bytes, num_tiles)) is not None:
        return need
    if rows is None or rows.shape[1] > ROW_READS_MAX:
        return read_need(readers, broadcast_index(small_shape, full_shape), held,
                         element_bytes, num_tiles)
    reads = rows.shape[1]
    received = np.zeros(num_tiles, dtype=np.int64)
    regions = np.zeros(num_tiles, dtype=np.int64)
    step = max(2, ROW_PAIRS_BLOCK // (reads * reads))
    previous = None  # the sorted row before the block, and its members
    for low in range(0, sources, step):
        tiles = _sorted_rows(rows[low:low + step])
        member = np.ones(tiles.shape, dtype=bool)  # each distinct tile of a row, once
        member[:, 1:] = tiles[:, 1:] != tiles[:, :-1]
        member &= tiles != held[low:low + step, None]
        got = tiles[member]
        received += np.bincount(got, minlength=num_tiles)[:num_tiles]
        regions += np.bincount(got, minlength=num_tiles)[:num_tiles]
        before = tiles[:-1] if previous is None else np.concatenate((previous[0], tiles[:-1]))
        before_member = member[:-1] if previous is None else \
            np.concatenate((previous[1], member[:-1]))
        after = tiles if previous is not None else tiles[1:]
        after_member = member if previous is not None else member[1:]
        first = low if previous is not None else low + 1
        same_source = held[first:low + tiles.shape[0]] == held[first - 1:low + tiles.shape[0] - 1]
        going_on = _going_on(after, after_member, before, before_member, same_source)
        regions -= np.bincount(after[going_on], minlength=num_tiles)[:num_tiles]
        previous = (tiles[-1:], member[-1:])
    if not received.any():
        return ExchangeNeed.none(num_tiles)
    return ExchangeNeed(received * element_bytes, regions)


def _going_on(after: np.ndarray, after_member: np.ndarray, before: np.ndarray,
              before_member: np.ndarray, same_source: np.ndarray) -> np.ndarray:
    """For ``broadcast_read_need``'s sorted rows: whether each tile an element is received
    by (``after_member``) also receives the element before it (``before`` and
    ``before_member``, the row before) from the same tile (``same_source``). A row equal
    to the one before it, from the same tile, goes on wherever it is received (its
    members are the row before's); only the other rows are compared pairwise."""
    going_on = after_member & same_source[:, None]
    other = np.flatnonzero(same_source & (after != before).any(axis=1))
    if other.size:
        both = (after[other][:, :, None] == before[other][:, None, :]) \
            & after_member[other][:, :, None] & before_member[other][:, None, :]
        going_on[other] = both.any(axis=2)
    return going_on


#: Most (element, tile) marks of a reads table a cost walk keeps for the next question.
KEPT_TABLE_MAX = 1 << 24
#: ``broadcast_read_need`` takes one table of (element, tile) marks when its cells number
#: at most ``TABLE_CELLS_PER_READ`` per read of the operand plus ``TABLE_CELLS_ALWAYS``.
#: The table costs a few passes over every cell (zeroed, marked, counted, copied for the
#: region starts) however few are marked, where sorting the pairs costs a sort of the
#: reads: many sources on many tiles, each read a few times, leave most cells empty and
#: are sorted; a table of up to a million cells is always taken.
TABLE_CELLS_PER_READ = 16
TABLE_CELLS_ALWAYS = 1 << 20


def _table_broadcast_need(readers: np.ndarray, readers_key: tuple | None,
                          full_shape: tuple[int, ...], small_shape: tuple[int, ...],
                          held: np.ndarray, element_bytes: int,
                          num_tiles: int) -> ExchangeNeed | None:
    """``broadcast_read_need`` from one table of (source element, tile) marks, made block
    by block from the broadcast index view (no sort of the pairs, no index array as long
    as the readers): tile t receives element e when it reads e and e is not held there;
    e starts a region on t unless t also receives e - 1 from the tile holding e. None
    (ask ``read_need``) when the table would be large beside the reads
    (``TABLE_CELLS_PER_READ``), or a tile id lies outside ``[0, num_tiles)``. Inside a
    cost walk the marks of the reads (before the held elements are taken out) are kept
    for the next question about equal readers (``readers_key``, their ``value_key``) and
    shapes, up to ``KEPT_TABLE_MAX`` of them; the rows of reads are made only when the
    marks are not kept."""
    sources, reads = prod(small_shape), prod(full_shape)
    if not sources or not reads or held.size != sources or readers.size != reads \
            or sources * num_tiles > TABLE_CELLS_PER_READ * reads + TABLE_CELLS_ALWAYS:
        return None
    if not (int(readers.min()) >= 0 and int(readers.max()) < num_tiles
            and int(held.min()) >= 0 and int(held.max()) < num_tiles):
        return None
    order = _rows_order(full_shape, small_shape)
    memo = count_memo.active() if sources * num_tiles <= KEPT_TABLE_MAX else None
    if order is not None:
        def marks() -> np.ndarray:
            rows = _rows_in_order(readers, full_shape, order, sources)
            return _read_by_rows(rows, num_tiles)

        if memo is not None and readers_key is not None:
            table = memo.remembered_key(
                (("reads", full_shape, small_shape, num_tiles), readers_key), marks).copy()
        else:
            table = marks()
    else:
        index = broadcast_index_view(small_shape, full_shape)
        tiles = readers.reshape(index.shape)
        table = np.zeros(sources * num_tiles, dtype=bool)
        for block in _blocks(index.shape, COUNT_BLOCK):
            table[_pair_keys(index, tiles, block, num_tiles)] = True
        table = table.reshape(sources, num_tiles)
    table[np.arange(sources), held] = False  # an element is not received where it lies
    received = np.count_nonzero(table, axis=0).astype(np.int64)
    if not received.any():
        return ExchangeNeed.none(num_tiles)
    starts = table.copy()
    starts[1:] &= ~(table[:-1] & (held[1:] == held[:-1])[:, None])
    regions = np.count_nonzero(starts, axis=0).astype(np.int64)
    return ExchangeNeed(received * element_bytes, regions)


def _read_by_rows(rows: np.ndarray, num_tiles: int) -> np.ndarray:
    """[sources, tiles]: whether tile t holds one of row s's reads, for tile ids ``rows``
    [sources, reads] in range. A row's reads come in runs of one tile where the broadcast
    axes are the layout's innermost (a row statistic, a scalar): only each run's first
    read is marked, ``COUNT_BLOCK`` reads at a time."""
    sources, reads = rows.shape
    table = np.zeros(sources * num_tiles, dtype=bool)
    step = max(1, COUNT_BLOCK // max(reads, 1))
    for low in range(0, sources, step):
        block = rows[low:low + step]
        first = np.ones(block.shape, dtype=bool)
        np.not_equal(block[:, 1:], block[:, :-1], out=first[:, 1:])
        keys = np.flatnonzero(first)
        keys //= reads
        keys += low
        keys *= num_tiles
        keys += block[first]
        table[keys] = True
    return table.reshape(sources, num_tiles)


def _same_shape_need(readers: np.ndarray, held: np.ndarray, element_bytes: int,
                     num_tiles: int) -> ExchangeNeed:
    """``read_need`` when element k reads source element k, without sorting by tile: a
    received element starts a region unless the element before it was received by the same
    tile from the same tile (a tile's elements ascend, so that is its previous one). So
    the figures follow from the runs of elements with one (reader, holder) pair: a remote
    run is received whole by its reader, and is one region, unless it continues a run
    of the chunk before.

    Compared ``SAME_SHAPE_CHUNK`` elements at a time (each chunk with the element before
    it, so a region crossing a chunk's edge is counted once): whole-array masks took
    bytes per element of a [8192, 8192] matmul operand (640 MB)."""
    received = np.zeros(num_tiles, dtype=np.int64)
    regions = np.zeros(num_tiles, dtype=np.int64)
    any_remote = False
    for begin in range(0, readers.size, SAME_SHAPE_CHUNK):
        before = 1 if begin else 0
        end = min(begin + SAME_SHAPE_CHUNK, readers.size)
        tiles, sources = readers[begin - before:end], held[begin - before:end]
        if not (sources[before:] != tiles[before:]).any():  # all read where held
            continue
        changed = tiles[1:] != tiles[:-1]
        changed |= sources[1:] != sources[:-1]
        starts = np.flatnonzero(changed)
        starts += 1
        # the runs of one (reader, holder) pair; the chunk's first run begins at the
        # element before the chunk when there is one (its region began there)
        starts = np.concatenate(([0], starts))
        run_tiles = tiles[starts]
        remote = run_tiles != sources[starts]
        lengths = np.diff(np.append(starts, tiles.size))
        lengths[0] -= before  # the element before the chunk was counted with its own
        remote &= lengths > 0
        if not remote.any():
            continue
        any_remote = True
        reader = run_tiles[remote].astype(np.int64)
        received += np.bincount(reader, weights=lengths[remote],
                                minlength=num_tiles)[:num_tiles].astype(np.int64)
        begun = remote.copy()
        begun[0] &= not before  # a run from the element before continues its region
        regions += np.bincount(run_tiles[begun], minlength=num_tiles)[:num_tiles]
    if not any_remote:
        return ExchangeNeed.none(num_tiles)
    return ExchangeNeed(received * element_bytes, regions)


def _ids(tiles: np.ndarray) -> np.ndarray:
    """Flat integer tile ids, kept in their own (narrow) type: widening every operand to
    int64 first was a large share of costing a real model."""
    flat = np.asarray(tiles).reshape(-1)
    return flat if np.can_cast(flat.dtype, np.int64) else flat.astype(np.int64)


def _distinct_pairs(tile: np.ndarray, element: np.ndarray, num_elements: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (tile, element) pairs, sorted by tile then element (``np.unique`` of
    ``tile * num_elements + element``, the same order). A pair equal to the one before it
    is dropped first (``_without_repeats``): a reduction's inputs or a row statistic's
    readers come in long runs of one (tile, element), which then are not sorted."""
    tile, element = _without_repeats(tile, element)
    stride = max(num_elements, 1)
    keys = tile.astype(np.int64) * stride + element
    space = (int(tile.max()) + 1) * stride
    if (int(tile.min()) >= 0 and space <= DENSE_PAIRS_MAX
            and space <= 64 * keys.size + (1 << 20)):
        seen = np.zeros(space, dtype=bool)
        seen[keys] = True
        keys = np.flatnonzero(seen)
    else:  # sorting beats np.unique's hash table here
        keys = np.sort(keys)
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys // stride, keys % stride


def _without_repeats(tile: np.ndarray, element: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The pairs less each one equal to the pair just before it (the same distinct set)."""
    if tile.size < 2:
        return tile, element
    repeat = element[1:] == element[:-1]
    repeat &= tile[1:] == tile[:-1]
    if not repeat.any():
        return tile, element
    keep = np.empty(tile.size, dtype=bool)
    keep[0] = True
    np.logical_not(repeat, out=keep[1:])
    return tile[keep], element[keep]


def _narrow(tiles: np.ndarray) -> np.ndarray:
    """Tile ids as int16 when they fit: numpy's stable sort of 16-bit keys is a radix sort."""
    small = np.iinfo(np.int16)
    if tiles.dtype.itemsize <= 2:
        return tiles
    if small.min <= int(tiles.min()) and int(tiles.max()) <= small.max:
        return tiles.astype(np.int16)
    return tiles


@lru_cache(maxsize=4096)
def _followed_axes(small: tuple[int, ...], full: tuple[int, ...]) -> tuple[int | None, ...]:
    """Per axis of ``small``, the axis of ``full`` it follows (None: broadcast), from the
    shape engine's projections; models repeat a few shape pairs, so they are remembered."""
    return broadcast_projections(full, small)[0]


def broadcast_index(small: tuple[int, ...], full: tuple[int, ...]) -> np.ndarray:
    """For each element of ``full`` (row-major), the element of ``small`` numpy reads.

    Which axes follow which comes from the shape engine (``broadcast_projections``), the
    same place that decides the shapes broadcast at all; a pair that does not broadcast
    raises its ``ShapeError``.
    """
    return broadcast_index_view(small, full).reshape(-1)


def broadcast_index_view(small: tuple[int, ...], full: tuple[int, ...]) -> np.ndarray:
    """``broadcast_index`` in the shape ``full``, as a read-only broadcast view: no array
    as large as ``full`` (a real LM head's logits gradient has tens of millions of
    elements, 8 bytes each as a flat index)."""
    small, full = tuple(small), tuple(full)
    followed = _followed_axes(small, full)
    index = np.zeros((1,) * len(full), dtype=np.int64)
    stride = 1
    for axis in reversed(range(len(small))):
        target = followed[axis]
        if target is not None and full[target] > 1:
            along = [1] * len(full)
            along[target] = full[target]
            index = index + (np.arange(full[target], dtype=np.int64) * stride).reshape(along)
        stride *= small[axis]
    return np.broadcast_to(index, full)


def broadcast_rows(full_tiles: np.ndarray, full_shape: tuple[int, ...],
                   small_shape: tuple[int, ...]) -> np.ndarray | None:
    """A full tensor's tiles as [elements of the small operand broadcast to it, reads of
    each] (a view where it can be): the axes that follow the small operand's first, in
    order, its broadcast axes last. None for an empty tensor, or where the small operand's
    axes do not map one to one onto the full tensor's."""
    full_shape, small_shape = tuple(full_shape), tuple(small_shape)
    order = _rows_order(full_shape, small_shape)
    if order is None:
        return None
    return _rows_in_order(full_tiles, full_shape, order, prod(small_shape))


def _rows_order(full_shape: tuple[int, ...], small_shape: tuple[int, ...]
                ) -> list[int] | None:
    """The full tensor's axes in ``broadcast_rows``' order, or None where it has no rows
    (decided by the shapes alone)."""
    if prod(small_shape) == 0 or prod(full_shape) == 0:
        return None
    lead = []
    for size, axis in zip(small_shape, _followed_axes(small_shape, full_shape), strict=True):
        if axis is not None and full_shape[axis] > 1:
            if size != full_shape[axis]:
                return None
            lead.append(axis)
        elif size != 1:
            return None
    if lead != sorted(lead):
        return None
    return lead + [axis for axis in range(len(full_shape)) if axis not in lead]


def _rows_in_order(full_tiles: np.ndarray, full_shape: tuple[int, ...], order: list[int],
                   sources: int) -> np.ndarray:
    """``broadcast_rows`` given its axis order (``_rows_order``)."""
    return np.asarray(full_tiles).reshape(full_shape).transpose(order).reshape(sources, -1)


#: Elements of a reader array ``most_read_tiles`` widens to 64-bit keys at a time.
COUNT_BLOCK = 1 << 18
#: Up to this many (element, tile) pairs, ``most_read_tiles`` counts in one dense table
#: (8 bytes a pair); beyond it, in one table per range of source elements, each a pass
#: over the reads, as long as the passes visit at most ``SCAN_VISITS_MAX`` reads in all
#: and their tables hold at most ``DENSE_CELLS_PER_READ`` cells per read (each cell is
#: zeroed and scanned: many passes over few reads of a large source, such as a gather from
#: an embedding table, would touch far more cells than there are reads); beyond that it
#: sorts each block's keys and merges the counts.
DENSE_COUNTS_MAX = 1 << 22
SCAN_VISITS_MAX = 1 << 30
DENSE_CELLS_PER_READ = 16


def most_read_tiles(reader_tiles: np.ndarray, source_index: np.ndarray, num_sources: int,
                    num_tiles: int, dtype: np.dtype | type = np.int64,
                    preference: np.ndarray | None = None,
                    any_reader: bool = False) -> np.ndarray:
    """For each source element, the tile among those reading it (``reader_tiles[k]`` reads
    ``source_index[k]``) that reads it most, the lowest among equals; 0 if none reads it.
    ``preference`` (a permutation of the tiles, most preferred first) breaks ties instead of
    the tile ids: among equals the earliest in it, and its first tile for an unread element.
    Placing an element there saves the most copies of it (Poplibs' rule for a broadcast
    operand, of which a bias is the one-axis case). With ``any_reader`` every tile reading
    an element counts alike, however often it reads it (each receives it once): the
    elements read by the same tiles are cut into as many runs of consecutive elements as
    there are such tiles, the runs going to them in ``preference`` order, so they are
    spread over all of them instead of all landing on one.

    ``source_index`` may be a broadcast view (``broadcast_index_view``) in any shape holding
    as many elements as ``reader_tiles``: the pairs are counted block by block
    (``COUNT_BLOCK`` elements), so no 64-bit array as long as the readers is made, and in
    tables of at most ``DENSE_COUNTS_MAX`` pairs (see there)."""
    index = np.asarray(source_index)
    tiles = np.asarray(reader_tiles).reshape(index.shape)
    rank = None if preference is None else _ranks(preference, num_tiles)
    if tiles.size and not 0 <= int(tiles.min()) <= int(tiles.max()) < num_tiles:
        raise TargetError(f"most_read_tiles: tile ids must lie in [0, {num_tiles}); got "
                          f"[{int(tiles.min())}, {int(tiles.max())}]")
    per_pass = max(1, DENSE_COUNTS_MAX // num_tiles)  # source elements one table counts
    passes = -(-num_sources // per_pass)
    blocks = _blocks(index.shape, COUNT_BLOCK)
    cells = min(num_sources, passes * per_pass) * num_tiles
    if any_reader:
        return _dealt_to_readers(index, tiles, blocks, num_sources, num_tiles, dtype, rank,
                                 preference)
    if passes <= 1 or (index.size * passes <= SCAN_VISITS_MAX
                       and cells <= DENSE_CELLS_PER_READ * index.size):
        result = np.zeros(num_sources, dtype=dtype)
        for low in range(0, num_sources, per_pass):
            high = min(low + per_pass, num_sources)
            result[low:high] = _dense_most_read(index, tiles, blocks, low, high, num_tiles,
                                                filtered=passes > 1, preference=preference)
        return result
    found_keys, found_counts = [], []
    for block in blocks:
        keys, block_counts = np.unique(_pair_keys(index, tiles, block, num_tiles),
                                       return_counts=True)
        found_keys.append(keys)
        found_counts.append(block_counts)
    keys, counts = _merged_counts(found_keys, found_counts)
    element, tile = keys // num_tiles, keys % num_tiles
    # by element, most reads, lowest tile (or the most preferred)
    order = np.lexsort((tile if rank is None else rank[tile], -counts, element))
    first = np.ones(order.size, dtype=bool)
    first[1:] = element[order][1:] != element[order][:-1]
    result = np.zeros(num_sources, dtype=dtype)
    if preference is not None:
        result[:] = preference[0]
    result[element[order][first]] = tile[order][first]
    return result


#: Elements of a [sources, readers] array ``most_read_by_rows`` sorts at a time.
ROWS_BLOCK = 1 << 20


def most_read_by_rows(reader_tiles: np.ndarray, num_tiles: int,
                      dtype: np.dtype | type = np.int64,
                      preference: np.ndarray | None = None) -> np.ndarray:
    """``most_read_tiles`` when source element r is read by the tiles of row r of
    ``reader_tiles`` [sources, reads] (every element read as often: a numpy-broadcast
    operand, its broadcast axes last): each row's most frequent tile, the lowest among
    equals (or the earliest in ``preference``). Each row is sorted and its longest run
    taken, ``ROWS_BLOCK`` elements at a time: no (element, tile) pair is counted or sorted
    over the whole tensor, which for many sources (a [1024, 1024] attention mask read by 12
    heads) took seconds a read; for few, ``most_read_by_table``'s one table is faster. A
    row equal to the row before it has its answer (``_new_rows``): only the others are
    sorted."""
    rows = np.asarray(reader_tiles)
    count, reads = rows.shape
    order = None if preference is None else np.asarray(preference).reshape(-1)
    rank = None if order is None else _ranks(order, num_tiles)
    result = _unread_answer(count, dtype, order)
    if count == 0 or reads == 0:
        return result
    step = max(1, ROWS_BLOCK // reads)
    position = np.arange(reads)
    for low in range(0, count, step):
        block, fill = _new_rows(rows[low:low + step])  # a row's answer is its row's
        keys = np.sort(block if rank is None else rank[block], axis=1)
        starts = np.ones(keys.shape, dtype=bool)
        starts[:, 1:] = keys[:, 1:] != keys[:, :-1]
        # the length of each run so far; the first position reaching a row's longest is
        # the end of its earliest longest run, the lowest key among equals
        first = np.maximum.accumulate(np.where(starts, position, 0), axis=1)
        best = np.argmax(position - first, axis=1)
        chosen = keys[np.arange(keys.shape[0]), best][fill]
        result[low:low + step] = chosen if order is None else order[chosen]
    return result


def most_read_by_table(rows: np.ndarray, num_tiles: int, dtype: np.dtype | type = np.int64,
                       preference: np.ndarray | None = None) -> np.ndarray:
    """``most_read_by_rows`` for few elements (``DENSE_COUNTS_MAX`` (element, tile)
    pairs): each row's reads counted per tile in a table, a block of rows at a time
    (``COUNT_BLOCK`` reads), keys made from the rows themselves (``most_read_tiles``
    makes them from a copy of the broadcast index): the most counted tile, the lowest
    among equals (or the earliest in ``preference``)."""
    count, reads = rows.shape
    order = None if preference is None else np.asarray(preference).reshape(-1)
    if order is not None:
        _ranks(order, num_tiles)  # checked as ``most_read_tiles`` checks it
    result = _unread_answer(count, dtype, order)
    if count == 0 or reads == 0:
        return result
    step = max(1, COUNT_BLOCK // reads)
    for low in range(0, count, step):
        block = rows[low:low + step]
        offsets = np.arange(block.shape[0], dtype=np.int64)[:, None] * num_tiles
        table = np.zeros(block.shape[0] * num_tiles, dtype=np.int64)
        for column in range(0, reads, COUNT_BLOCK):
            keys = offsets + block[:, column:column + COUNT_BLOCK]
            table += np.bincount(keys.reshape(-1), minlength=table.size)
        table = table.reshape(block.shape[0], num_tiles)
        result[low:low + step] = table.argmax(axis=1) if order is None else \
            order[table[:, order].argmax(axis=1)]
    return result


def _unread_answer(count: int, dtype: np.dtype | type, order: np.ndarray | None
                   ) -> np.ndarray:
    """The answer for ``count`` elements no tile reads: tile 0, or the first tile of
    ``order`` (every element read is overwritten)."""
    return np.full(count, 0 if order is None else order[0], dtype=dtype)


def _new_rows(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``block`` that differ from the row before them (the first included),
    and for each row of ``block`` the index among those of the one it equals: a layout's
    runs of one tile make most rows of a broadcast operand repeat the row before (an
    attention mask's element and the next are read by the same heads' tiles), and each
    row's sort then is done once per run of equal rows."""
    new = np.ones(block.shape[0], dtype=bool)
    if block.shape[0] > 1:
        np.any(block[1:] != block[:-1], axis=1, out=new[1:])
    return block[new], np.cumsum(new) - 1


def _sorted_rows(block: np.ndarray) -> np.ndarray:
    """``np.sort(block, axis=1)``, each run of equal rows sorted once (``_new_rows``)."""
    distinct, fill = _new_rows(block)
    return np.sort(distinct, axis=1)[fill]


#: Seeds the fixed random keys that fingerprint a set of reading tiles.
READER_SET_SEED = 20261126


def _dealt_to_readers(index: np.ndarray, tiles: np.ndarray, blocks: list[tuple],
                      num_sources: int, num_tiles: int, dtype: np.dtype | type,
                      rank: np.ndarray | None, preference: np.ndarray | None) -> np.ndarray:
    """``most_read_tiles`` with ``any_reader``: each element on one of the tiles reading
    it, dealt round them in preference order (see there)."""
    # pairs keyed by element, then the tile's place in preference order: ascending keys
    # are the (element, tile) reads in the order they are dealt, with no sort by rank
    if num_sources * num_tiles <= DENSE_COUNTS_MAX:  # a table of pairs: no sort of reads
        seen = np.zeros(num_sources * num_tiles, dtype=bool)
        for block in blocks:
            seen[_pair_keys(index, tiles, block, num_tiles, rank)] = True
        keys = np.flatnonzero(seen)
    else:
        found_keys = [np.unique(_pair_keys(index, tiles, block, num_tiles, rank))
                      for block in blocks]
        keys, _ = _merged_counts(found_keys, [np.ones_like(k) for k in found_keys])
    element, place = keys // num_tiles, keys % num_tiles
    tile = place if preference is None else np.asarray(preference).reshape(-1)[place]
    return _dealt(element, tile, num_sources, num_tiles, dtype, preference)


def dealt_by_rows(rows: np.ndarray, num_tiles: int, dtype: np.dtype | type,
                  preference: np.ndarray | None = None) -> np.ndarray:
    """``most_read_tiles`` with ``any_reader`` when source element r is read by the tiles
    of row r of ``rows`` [sources, reads] (a numpy-broadcast operand, its broadcast axes
    last, as ``most_read_by_rows`` takes it), worked out once per run of equal rows: a
    layout's runs of one tile make most rows repeat the row before (an attention mask read
    by 12 heads: a million rows, about five thousand runs), and equal rows have one set of
    readers. Each run's row is sorted for its distinct tiles; the elements read by one set
    of tiles (the same fingerprint as ``_dealt``'s) are dealt round them in element order,
    each element's place in its set counted from the runs before it. The answers of
    ``_dealt`` over every (element, tile) pair (a test holds them equal)."""
    sources, reads = rows.shape
    if sources == 0 or reads == 0:  # no element is read
        return _dealt(np.zeros(0, np.int64), np.zeros(0, np.int64), sources, num_tiles, dtype,
                      preference)
    order = None if preference is None else np.asarray(preference).reshape(-1)
    rank = None if order is None else _ranks(order, num_tiles)
    starts = _row_run_starts(rows)
    lengths = np.diff(np.append(starts, sources))
    distinct = rows[starts]
    sorted_keys = np.sort(distinct if rank is None else rank[distinct], axis=1)
    first = np.ones(sorted_keys.shape, dtype=bool)
    np.not_equal(sorted_keys[:, 1:], sorted_keys[:, :-1], out=first[:, 1:])
    key = sorted_keys[first].astype(np.int64)  # each run's distinct readers, in order
    tile = key if order is None else order[key]
    count = first.sum(axis=1)  # readers of each run's elements
    offset = np.cumsum(count) - count
    keys_of_tiles = np.random.default_rng(READER_SET_SEED).integers(1, 2**60, num_tiles)
    _, group = np.unique(np.add.reduceat(keys_of_tiles[tile], offset), return_inverse=True)
    group = group.reshape(-1)
    # elements of the same readers before each run, in element order
    by_group = np.argsort(group, kind="stable")
    grouped = lengths[by_group]
    ahead = np.cumsum(grouped) - grouped  # elements of the groups and runs before, so ordered
    opens = np.flatnonzero(np.diff(group[by_group], prepend=-1))  # each group's first run
    before = np.empty(starts.size, np.int64)
    before[by_group] = ahead - ahead[opens][group[by_group]]
    sizes = np.add.reduceat(grouped, opens)
    run = np.repeat(np.arange(starts.size), lengths)
    place = np.arange(sources, dtype=np.int64) - (starts - before)[run]
    chosen = tile[offset[run] + place * count[run] // sizes[group[run]]]
    return chosen.astype(dtype)


def _row_run_starts(rows: np.ndarray) -> np.ndarray:
    """Where each run of equal rows of ``rows`` starts, ``ROWS_BLOCK`` reads compared at
    a time."""
    sources, reads = rows.shape
    new = np.ones(sources, dtype=bool)
    step = max(1, ROWS_BLOCK // max(reads, 1))
    for low in range(1, sources, step):
        high = min(low + step, sources)
        np.any(rows[low:high] != rows[low - 1:high - 1], axis=1, out=new[low:high])
    return np.flatnonzero(new)


def _dealt(element: np.ndarray, tile: np.ndarray, num_sources: int, num_tiles: int,
           dtype: np.dtype | type, preference: np.ndarray | None) -> np.ndarray:
    """``_dealt_to_readers`` from the distinct (element, tile) reads, by element, then
    the tiles in preference order (or by id)."""
    readers = np.bincount(element, minlength=num_sources)
    starts = np.concatenate(([0], np.cumsum(readers)[:-1]))
    result = np.full(num_sources, 0 if preference is None else preference[0], dtype=dtype)
    read = np.flatnonzero(readers)
    # elements read by the same set of tiles form a group (a fingerprint of the set: a
    # sum of fixed random keys, one per tile); each group is cut into as many runs of
    # consecutive elements as it has readers, one run per reader in preference order
    keys_of_tiles = np.random.default_rng(READER_SET_SEED).integers(1, 2**60, num_tiles)
    fingerprint = np.zeros(read.size, np.int64)  # of the read elements; by element,
    if read.size:  # their reads are consecutive: summed run by run (wrapping, exact)
        fingerprint = np.add.reduceat(keys_of_tiles[tile], starts[read])
    _, group = np.unique(fingerprint, return_inverse=True)
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group)
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    place = np.empty(read.size, np.int64)
    place[order] = np.arange(read.size) - first[group[order]]
    count = readers[read]
    result[read] = tile[starts[read] + place * count // sizes[group]]
    return result


def _pair_keys(index: np.ndarray, tiles: np.ndarray, block: tuple, num_tiles: int,
               rank: np.ndarray | None = None) -> np.ndarray:
    """``element * num_tiles + tile`` of one block's reads (a copy of the block, widened),
    or with ``rank`` the tile's rank in its place."""
    keys = index[block].reshape(-1).astype(np.int64)
    keys *= num_tiles
    read = tiles[block].reshape(-1)
    keys += read if rank is None else rank[read]
    return keys


def _ranks(preference: np.ndarray, num_tiles: int) -> np.ndarray:
    """Each tile's place in ``preference``, which must be a permutation of the tiles."""
    order = np.asarray(preference).reshape(-1)
    if order.size != num_tiles or not np.array_equal(np.sort(order), np.arange(num_tiles)):
        raise TargetError(f"most_read_tiles: the preference must be a permutation of the "
                          f"{num_tiles} tiles, got {order.size} entries")
    rank = np.empty(num_tiles, dtype=np.int64)
    rank[order] = np.arange(num_tiles)
    return rank


def _dense_most_read(index: np.ndarray, tiles: np.ndarray, blocks: list[tuple], low: int,
                     high: int, num_tiles: int, filtered: bool,
                     preference: np.ndarray | None = None) -> np.ndarray:
    """``most_read_tiles`` of source elements [low, high), from one table of counts per
    (element, tile); ``filtered``: reads of other elements are skipped."""
    space = (high - low) * num_tiles
    counts = np.zeros(space, dtype=np.int64)
    for block in blocks:
        keys = _pair_keys(index, tiles, block, num_tiles)
        if filtered:
            keys -= low * num_tiles
            keys = keys[(keys >= 0) & (keys < space)]
        np.add.at(counts, keys, 1)  # no second table as large as ``counts``
    # argmax takes the lowest tile among equals, and tile 0 for an element no one reads;
    # with a preference the columns are first put in its order
    table = counts.reshape(high - low, num_tiles)
    if preference is None:
        return table.argmax(axis=1)
    order = np.asarray(preference).reshape(-1)
    return order[table[:, order].argmax(axis=1)]


def _blocks(shape: tuple[int, ...], limit: int) -> list[tuple]:
    """Indices cutting an array of ``shape`` into row-major blocks of at most ``limit``
    elements (leading axes split first)."""
    found: list[tuple] = []

    def split(prefix: tuple, axis: int) -> None:
        if axis == len(shape):
            found.append(prefix)
            return
        rest = prod(shape[axis + 1:])
        step = max(1, limit // max(rest, 1))
        if step >= shape[axis]:
            found.append(prefix)
        elif step > 1 or axis == len(shape) - 1:
            found.extend((*prefix, slice(i, i + step)) for i in range(0, shape[axis], step))
        else:
            for i in range(shape[axis]):
                split((*prefix, i), axis + 1)

    split((), 0)
    return found


def _merged_counts(keys: list[np.ndarray], counts: list[np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of several blocks (each sorted and distinct) and their summed
    counts, ascending."""
    if len(keys) == 1:
        return keys[0], counts[0]
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    all_keys, all_counts = np.concatenate(keys), np.concatenate(counts)
    order = np.argsort(all_keys, kind="stable")
    all_keys, all_counts = all_keys[order], all_counts[order]
    starts = np.flatnonzero(np.concatenate(([True], all_keys[1:] != all_keys[:-1])))
    return all_keys[starts], np.add.reduceat(all_counts, starts)


def block_need(held: np.ndarray, blocks: np.ndarray, starts: np.ndarray,
               block_sizes: np.ndarray, tile_block: np.ndarray, element_bytes: int,
               num_tiles: int) -> ExchangeNeed:
    """What tiles receive when tile t reads block ``tile_block[t]`` (-1: none) of an operand
    whose block contents are listed, block by block, as items: item i is an element of block
    ``blocks[i]`` (int32) held on tile ``held[i]``, and ``starts[i]`` marks where a block or
    a gap in its elements begins. Each reading tile receives its block's distinct elements
    less those it holds, in as many regions as the block has runs of consecutive elements
    from one source tile, less the runs it holds itself (removing a tile's own runs never
    joins two others: they are not contiguous). One pass in C++ counts the runs."""
    runs_per_block, held_elements, held_runs = hooks.block_reader_counts(
        held, blocks, starts, tile_block, block_sizes.size)
    return reader_need(runs_per_block, held_elements, held_runs, block_sizes, tile_block,
                       element_bytes, num_tiles)


def reader_need(runs_per_block: np.ndarray, held_elements: np.ndarray,
                held_runs: np.ndarray, block_sizes: np.ndarray, tile_block: np.ndarray,
                element_bytes: int, num_tiles: int) -> ExchangeNeed:
    """``block_need`` from its counts: each reading tile receives its block's elements
    less those it holds, in the block's runs less those it holds."""
    readers = tile_block >= 0
    reader_blocks = tile_block[readers]
    received = np.zeros(num_tiles, np.int64)
    regions = np.zeros(num_tiles, np.int64)
    received[readers] = (block_sizes[reader_blocks] - held_elements[readers]) * element_bytes
    regions[readers] = runs_per_block[reader_blocks] - held_runs[readers]
    return ExchangeNeed(received, regions)


def shared_bus_need(need: ExchangeNeed, held_elements: np.ndarray, block_sizes: np.ndarray,
                    tile_block: np.ndarray, element_bytes: int) -> ExchangeNeed:
    """``need`` of readers paired on super tiles (tiles 2i and 2i + 1 reading one block):
    the elements of the block neither holds reach both together over their shared exchange
    bus, at twice a tile's rate, so each is charged half of them (Poplibs'
    ExchangeEstimator doubles the rate alike). What a tile receives from its partner, or
    the partner from it, is charged in full. Regions are left as counted."""
    readers = np.flatnonzero(tile_block >= 0)
    partners = readers ^ 1
    paired = (partners < tile_block.size)
    readers, partners = readers[paired], partners[paired]
    paired = tile_block[partners] == tile_block[readers]
    readers, partners = readers[paired], partners[paired]
    neither = (block_sizes[tile_block[readers]] - held_elements[readers]
               - held_elements[partners])
    received = np.asarray(need.received_bytes, np.int64).copy()
    received[readers] -= np.maximum(neither, 0) * element_bytes // 2
    return ExchangeNeed(received, np.asarray(need.regions, np.int64))


def axis_bounds(size: int, count: int) -> np.ndarray:
    """Where an axis of ``size`` cut into ``count`` parts is cut: ``floor(p * size / count)``
    for p = 0 .. count (the matmul partition model's cut)."""
    return np.arange(count + 1) * size // count


def axis_parts(size: int, count: int) -> np.ndarray:
    """The part of each index of an axis of ``size`` cut into ``count`` parts
    (``axis_bounds``)."""
    return np.searchsorted(axis_bounds(size, count), np.arange(size), side="right") - 1


def matmul_reader_blocks(plan: MatmulPartition, operand: str, num_tiles: int) -> np.ndarray:
    """For each tile, the block of matmul ``operand`` it reads under a partition ``plan``,
    -1 for tiles the plan leaves idle. Tile ((g * gK + k) * gN + n) * gM + m reads LHS block
    (g, m, k), RHS block (g, k, n) and, in a pass that shares the partition and reads the
    output, output block (g, m, n)."""
    used = plan.tiles_used
    tile = np.arange(used)
    m = tile % plan.rows
    n = (tile // plan.rows) % plan.cols
    k = (tile // (plan.rows * plan.cols)) % plan.inner
    g = tile // (plan.rows * plan.cols * plan.inner)
    if operand == "lhs":
        block = (g * plan.rows + m) * plan.inner + k
    elif operand == "rhs":
        block = (g * plan.inner + k) * plan.cols + n
    else:
        block = (g * plan.rows + m) * plan.cols + n
    result = np.full(num_tiles, -1, dtype=np.int64)
    result[:used] = block
    return result


# -- reductions (Poplibs' popops::reduce, approximated; docs/ipu-model.md) --------------------
def reduced_rows(shape: tuple[int, ...], axes: tuple[int, ...], tiles: np.ndarray
                 ) -> np.ndarray | None:
    """A layout as [results, inputs of each] when ``axes`` are the innermost axes of
    ``shape`` (a softmax's or a layer norm's statistics: result g reduces row g), else
    None (then ``reduction_groups`` says which result each element goes to)."""
    rank = len(shape)
    if not axes or tuple(axes) != tuple(range(rank - len(axes), rank)) or not prod(shape):
        return None
    return _ids(tiles).reshape(prod(shape[:rank - len(axes)]), -1)


def row_partials(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reduction_partials`` when result g reduces row g of ``rows``: found from the
    first element of each run of one tile in a row, without a per-element group array."""
    length = rows.shape[1]
    first = np.ones(rows.shape, dtype=bool)
    np.not_equal(rows[:, 1:], rows[:, :-1], out=first[:, 1:])
    where = np.flatnonzero(first)
    return _distinct_pairs(rows.reshape(-1)[where], where // length, max(rows.shape[0], 1))


def row_read_need(rows: np.ndarray, source_tiles: np.ndarray, element_bytes: int,
                  num_tiles: int) -> ExchangeNeed:
    """``read_need`` when element (g, j) of a layout ``rows`` reads source element g (a
    row statistic broadcast back): only the first of each run of remote reads of one
    tile in a row is kept before the pairs are sorted (the same distinct pairs). Inside a
    cost walk a question asked before about equal layouts is answered again (a norm's
    least-exchange bound asks what its exchange asked)."""
    rows, held = np.asarray(rows), _ids(source_tiles)
    return remembered_need(("row reads", rows.shape, element_bytes, num_tiles), (rows, held),
                           lambda: _row_read_need(rows, held, element_bytes, num_tiles))


def _row_read_need(rows: np.ndarray, held: np.ndarray, element_bytes: int,
                   num_tiles: int) -> ExchangeNeed:
    """``row_read_need``, worked out."""
    remote = rows != held[:, None]
    if not remote.any():
        return ExchangeNeed.none(num_tiles)
    first = remote.copy()
    first[:, 1:] &= ~(remote[:, :-1] & (rows[:, 1:] == rows[:, :-1]))
    where = np.flatnonzero(first)
    tile, element = _distinct_pairs(rows.reshape(-1)[where], where // rows.shape[1],
                                    held.size)
    return _sorted_pairs_need(tile, element, held, element_bytes, num_tiles)


def reduction_groups(shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """For each element of a tensor of ``shape`` (row-major), the flat index of the result
    element it is reduced into when ``axes`` are reduced (results in row-major order of the
    kept axes, which is the same with or without kept unit axes)."""
    kept = tuple(1 if axis in axes else size for axis, size in enumerate(shape))
    return broadcast_index(kept, tuple(shape))


def reduction_partials(groups: np.ndarray, tiles: np.ndarray, num_groups: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The partial results a reduction's first stage leaves: one per (result element, tile
    holding some of its inputs), each tile reducing what it holds without exchange. Returns
    (tile, result element) of each partial, sorted by tile then result element."""
    source = _ids(tiles)  # narrow: ``_distinct_pairs`` widens only the pairs it keeps
    group = np.asarray(groups, np.int64).reshape(-1)
    if not group.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return _distinct_pairs(source, group, max(num_groups, 1))


def single_partial_tiles(groups: np.ndarray | None, tiles: np.ndarray, num_groups: int,
                         partials: tuple[np.ndarray, np.ndarray] | None = None
                         ) -> np.ndarray | None:
    """Each result element's tile when every result element has all its inputs on one tile
    (the reduction then needs no exchange and Poplibs computes each result there), else
    None. ``partials``: ``reduction_partials``' answer, when already known (``groups`` is
    then not read)."""
    tile, group = partials if partials is not None else \
        reduction_partials(groups, tiles, num_groups)
    if group.size != num_groups:
        return None  # some result has partials on several tiles, or no inputs at all
    result = np.empty(num_groups, dtype=np.asarray(tiles).dtype)
    result[group] = tile
    return result


def reduction_need(groups: np.ndarray | None, tiles: np.ndarray, result_tiles: np.ndarray,
                   element_bytes: int, num_tiles: int,
                   partials: tuple[np.ndarray, np.ndarray] | None = None) -> ExchangeNeed:
    """What tiles receive when a reduction's partials (``reduction_partials``, or
    ``partials`` when already known: ``groups`` is then not read) travel to the tiles of
    their result elements, ``result_tiles``: each partial not already there is received
    once by its result's tile; a region is a run of consecutive result elements whose
    partials come from one tile."""
    tile, group = partials if partials is not None else \
        reduction_partials(groups, tiles, np.size(result_tiles))
    if not tile.size:
        return ExchangeNeed.none(num_tiles)
    # Partials in (tile, result) order: consecutive ids from one tile are consecutive results.
    return read_need(np.asarray(result_tiles).reshape(-1)[group], np.arange(tile.size), tile,
                     element_bytes, num_tiles)
