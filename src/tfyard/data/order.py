"""Deterministic, step-addressable input: what a seeded run reads is a function of position.

The training stream is numbered by the *global example number* n = 0, 1, 2, ... over all
input pipelines and epochs. Epoch e = n // E (E examples) holds every example exactly once,
in an order drawn from (seed, e); each augmentation draws from (seed, n). So a run resumed at
step s starts the stream at n = s x global_batch and reads what an unbroken run would have,
without replaying anything, and the union over pipelines is the same whatever their count.

Global batch t holds n in [t G, (t+1) G). Pipeline i of N supplies the contiguous slots
[i G/N, (i+1) G/N) of every global batch, so its per-replica batches, in replica order,
concatenate to the global batch (replicas are numbered worker by worker).

Random-access data (arrays, file lists, fixed-length records) maps n to an example with
`index_shuffle`; TFRecord shards, which have no random access, are read in a seeded shard
order per epoch, permuted within windows of consecutive records; a resume skips whole
shards and then raw records before anything is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfyard.errors import UserError

ENDLESS = 1 << 62
BLOCK = 1024  # examples addressed per vectorised step of the random-access index stream
WINDOW = 4096  # TFRecord records permuted together (memory: two windows of raw records)
_ORDER, _SHARDS, _WINDOWS = 1, 2, 3  # salts: one stream of seeds per use
ROUNDS = 8  # the cipher rounds of every shuffle: TensorFlow's advice for small sets (default 4)
MIXED_MAX = (1 << 63) - 1  # the largest value `_keys` mixes: a 64-bit block


@dataclass(frozen=True)
class Layout:
    """Where this pipeline's examples sit in the global stream."""

    pipelines: int
    index: int
    global_batch: int
    start: int  # the first global example number to produce

    @property
    def share(self) -> int:
        """Examples of each global batch that this pipeline supplies."""
        return self.global_batch // self.pipelines

    @classmethod
    def of(cls, spec) -> Layout:
        count, index = spec.pipelines
        ctx = spec.input_context
        replicas = max(ctx.num_replicas_in_sync if ctx else 1, count)
        batch = spec.global_batch or spec.batch_size * replicas
        if batch % count or (batch // count) % spec.batch_size:
            raise UserError(f"global batch {batch} does not split into {count} input "
                            f"pipelines of whole {spec.batch_size}-example batches")
        if spec.start_example < 0 or (count > 1 and spec.start_example % batch):
            raise UserError(f"start example {spec.start_example} must be a whole number of "
                            f"global batches ({batch}) when {count} pipelines share the input")
        return cls(count, index, batch, spec.start_example)

    def first_local(self) -> int:
        return (self.start // self.global_batch) * self.share + self.start % self.global_batch

    def local_end(self, total: int) -> int:
        """One past this pipeline's last local position below global example `total`."""
        full, rest = divmod(total, self.global_batch)
        return full * self.share + min(max(rest - self.index * self.share, 0), self.share)

    def global_number(self, local):
        return ((local // self.share) * self.global_batch + self.index * self.share
                + local % self.share)

    def owns(self, number):
        return (number % self.global_batch) // self.share == self.index


def _keys(seed: int, salt: int, values):
    """One index-shuffle key per element of `values` (non-negative; int64 [k, 3]), each of
    whose words depends on every bit of `seed`, `salt` and the value.

    RandomIndexShuffle's cipher reads only a key word's low bits (8 for sets under 65,536
    items: seeds or epochs 256 apart drew the same order), and at its default 4 rounds a key
    whose first and third words are equal permutes barely at all (seed s at epoch s kept
    most of 40 shards in place). So the value is first put through the same cipher on a
    64-bit block (its 32-bit words read whole), keyed by the seed's two halves and the
    salt, and its two halves become the key's first words."""
    import tensorflow as tf

    values = tf.cast(values, tf.int64)
    seed &= (1 << 64) - 1
    mixed = tf.raw_ops.RandomIndexShuffle(
        index=values, seed=tf.constant([seed & 0xFFFFFFFF, seed >> 32, salt], tf.int64),
        max_index=tf.constant(MIXED_MAX, tf.int64), rounds=ROUNDS)
    return tf.stack([tf.bitwise.bitwise_and(mixed, 0xFFFFFFFF),
                     tf.bitwise.right_shift(mixed, 32),
                     tf.fill(tf.shape(values), tf.constant(salt, tf.int64))], axis=-1)


def permute(index, seed: int, salt: int, epoch, size):
    """Position `index` (vector) of a permutation of [0, size) drawn from (seed, salt, epoch)."""
    import tensorflow as tf

    index = tf.cast(index, tf.int64)
    epoch = tf.broadcast_to(tf.cast(epoch, tf.int64), tf.shape(index))
    return tf.raw_ops.RandomIndexShuffle(index=index, seed=_keys(seed, salt, epoch),
                                         max_index=tf.cast(size, tf.int64) - 1, rounds=ROUNDS)


def example_seed(seed: int, number):
    """The stateless seed of global example `number`: every augmentation derives from it."""
    import tensorflow as tf

    return tf.stack([tf.constant(seed, tf.int64), tf.cast(number, tf.int64)])


def positions(spec, total: int, block: int = BLOCK):
    """Blocks of (global example number, example id) this pipeline reads, in order."""
    import tensorflow as tf

    layout = Layout.of(spec)
    end = ENDLESS if spec.repeated else layout.local_end(total)

    def address(local):
        number = layout.global_number(local)
        slot = number % total
        if not spec.shuffled:
            return number, slot
        return number, permute(slot, spec.seed, _ORDER, number // total, total)

    return tf.data.Dataset.range(layout.first_local(), end).batch(block).map(address)


def random_access(source, total: int, spec, announce=None):
    """(number, id, *record) for records `source` can hold in memory, read once per pipeline.
    `announce` (`data.fetched`) is told the records' first column (files) in reading order,
    a block ahead (at most an epoch: a small set's files are not announced epochs ahead)."""
    import tensorflow as tf

    def stream(*table):
        def pick(number, ids):
            picked = [tf.gather(column, ids) for column in table]
            if announce is not None:
                picked[0] = announce(picked[0])
            return (number, ids, *picked)

        if announce is None:
            return positions(spec, total).map(pick).unbatch()
        return positions(spec, total, min(BLOCK, total)).map(pick).prefetch(1).unbatch()

    return source.batch(max(total, 1)).flat_map(stream)


def shard_stream(files: list[str], counts: list[int], spec, open_file, window: int = WINDOW,
                 announce=None):
    """(number, id, raw record) for TFRecord-like shards: see the module docstring.
    `announce` (`data.fetched`) is told each epoch's files in reading order."""
    import numpy as np
    import tensorflow as tf

    from tfyard.data.fetched import interleaved

    layout = Layout.of(spec)
    total = int(sum(counts))
    if total == 0:
        raise UserError(f"{files[0]} and the other shards of this split hold no records")
    window = min(window, total)
    counts_t = tf.constant(counts, tf.int64)
    offsets = tf.constant(np.cumsum([0] + list(counts[:-1])), tf.int64)
    paths = tf.constant(files)
    first_epoch = layout.start // total
    longest = int(max(counts)) + 1

    def epoch_stream(epoch):
        order = (permute(tf.range(len(files)), spec.seed, _SHARDS, epoch, len(files))
                 if spec.shuffled else tf.range(len(files), dtype=tf.int64))
        sizes = tf.gather(counts_t, order)
        ends = tf.cumsum(sizes)
        begins, first_ids = ends - sizes, tf.gather(offsets, order)
        begin = tf.where(epoch == first_epoch, tf.constant(layout.start % total, tf.int64),
                         tf.constant(0, tf.int64))
        window_start = (begin // window) * window
        shard = tf.searchsorted(ends, [window_start], side="right")[0]
        reading = tf.gather(paths, order)[shard:]
        records = tf.data.Dataset.from_tensor_slices(
            reading if announce is None else announce(reading))
        # a shard is read whole before the next (block_length), so the order is the
        # shards' whatever the cycle; streamed, one is open at a time
        records = interleaved(records, open_file, announce is not None, min(len(files), 4),
                              min(len(files), 4), block_length=longest)
        records = records.skip(window_start - begins[shard]).batch(window)

        def mix(k, raw):
            size = tf.shape(raw, out_type=tf.int64)[0]
            local = tf.range(size)
            picked = (permute(local, spec.seed, _WINDOWS, epoch * (1 << 32) + k, size)
                      if spec.shuffled else local)
            stream = k * window + picked
            where = tf.searchsorted(ends, stream, side="right")
            ids = tf.gather(first_ids, where) + stream - tf.gather(begins, where)
            number = epoch * total + k * window + local
            keep = tf.logical_and(number >= layout.start, layout.owns(number))
            return tuple(tf.boolean_mask(v, keep) for v in (number, ids, tf.gather(raw, picked)))

        windows = tf.data.Dataset.zip(tf.data.Dataset.range(window_start // window, ENDLESS),
                                      records)
        return windows.map(mix)

    epochs = tf.data.Dataset.range(first_epoch, ENDLESS if spec.repeated else 1)
    # the next window (of this epoch or the next) is read and permuted while one is consumed
    return epochs.flat_map(epoch_stream).prefetch(1).unbatch()
