# SPDX-License-Identifier: MIT
"""The docstring examples of ClusterCoordinator (../shared/seeds/000_*), nearly
verbatim: native functions by name instead of tf.functions, coord.Dataset
instead of tf.data, a ps variable instead of tf.Variable."""
import coord


def test_create_per_worker_dataset_example(cc):
    coordinator = cc

    worker_fn = coord.function("next", returns=int)  # return next(iterator)

    def per_worker_dataset_fn():
        return coord.Dataset("from_tensor_slices", [3] * 3)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iter = iter(per_worker_dataset)
    remote_value = coordinator.schedule(worker_fn, args=(per_worker_iter,))
    assert remote_value.fetch() == 3


def test_fetch_example(cc, request):
    coordinator = cc

    def dataset_fn():
        return coord.Dataset("from_tensor_slices", [1, 1, 1])

    # with strategy.scope(): v = tf.Variable(initial_value=0)
    v = coordinator.create_variable("v_fetch_%s" % request.node.callspec.id, initial_value=0)

    # def worker_fn(iterator): v.assign_add(next(iterator)); return v.read_value()
    worker_fn = coord.function("assign_add_next", returns="f")

    distributed_dataset = coordinator.create_per_worker_dataset(dataset_fn)
    distributed_iterator = iter(distributed_dataset)
    result = coordinator.schedule(worker_fn, args=(v, distributed_iterator))
    assert coordinator.fetch(result) == 1


def test_schedule_join_example(cc):
    """The class docstring's pattern: schedule many, join, fetch."""
    coordinator = cc
    step_fn = coord.function("square", returns=int)
    results = [coordinator.schedule(step_fn, args=(i,)) for i in range(100)]
    coordinator.join()
    assert coordinator.done()
    assert coordinator.fetch(results) == [i * i for i in range(100)]
