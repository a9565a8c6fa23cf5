"""Ranges inside tf.data: Dataset.map functions run on tf.data's own threads.

    python -m nvtx_plugins_tf record -o out/data -- python examples/tf_data_pipeline.py

'decode' and 'augment' (domain 'Data') open and close on tf.data's worker threads, one
per element; 'consume' (domain 'Train') on the main thread, one per batch.
"""

import argparse

import tensorflow as tf

import nvtx_plugins_tf as nvtx_tf


@nvtx_tf.ops.trace("decode", domain_name="Data")
def decode(i):
    x = tf.random.stateless_normal([32, 32, 3], seed=tf.stack([i, i]))
    return x, i % 10


@nvtx_tf.ops.trace("augment", domain_name="Data")
def augment(x, label):
    return tf.image.flip_left_right(x) * 0.5, label


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    dataset = (
        tf.data.Dataset.range(args.elements)
        .map(decode, num_parallel_calls=2)
        .map(augment, num_parallel_calls=2)
        .batch(args.batch_size)
        .prefetch(1)
    )
    total = 0.0
    for batch, (x, labels) in enumerate(dataset):
        with nvtx_tf.ops.range("consume", domain_name="Train", payload=batch):
            total += float(tf.reduce_sum(x)) + float(tf.reduce_sum(labels))
    print(f"tf_data_pipeline: {args.elements} elements in {batch + 1} batches (checksum {total:.2f})")


if __name__ == "__main__":
    main()
