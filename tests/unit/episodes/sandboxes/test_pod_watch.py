"""RunPodWatch against the Kubernetes API emulator over real HTTP (lightkube's AsyncClient): one
list and one watch serve every waiter, and the cache survives a dropped or expired watch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from lightkube.resources.core_v1 import Pod

from rlstack.episodes.sandboxes.api_calls import ApiCalls, ApiCallSettings
from rlstack.episodes.sandboxes.pod_watch import PodGone, RunPodWatch, WatchClosed
from rlstack.kube.connection import connect

NS = "rl"
RUN = {"harbor-run": "r"}
FAST = ApiCallSettings(base_delay=0.05, max_delay=0.2)
"""A watch that fails is opened again within 0.2 s: short for a test, the same behaviour."""


def finished(pod: Pod) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def watch(api) -> RunPodWatch:  # noqa: ANN001 - FakeKubeApiServer
    return RunPodWatch(connect(api.url, NS), NS, RUN, api_calls=ApiCalls(FAST))


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def verbs(api) -> list[str]:  # noqa: ANN001 - FakeKubeApiServer
    return [verb for verb, _, _ in list(api.requests)]


async def take_the_watch_down(api, abrupt: bool = True) -> None:  # noqa: ANN001 - FakeKubeApiServer
    """Cut the open watch and refuse new ones (503) until ``api.clear_failures()``; returns once the
    watcher has been refused at least once, so what the test does next happens while it is down."""
    await until(lambda: api.open_watches == 1)
    opened = verbs(api).count("watch")
    api.fail_next("watch", 503, times=10_000)
    await asyncio.to_thread(api.drop_watches, abrupt)
    await until(lambda: verbs(api).count("watch") > opened)


def test_fifty_waits_on_fifty_pods_cost_one_list_and_one_watch(kube_api):
    for i in range(50):
        kube_api.add_pod(NS, f"p-{i}", RUN, phase="Pending")
    kube_api.add_pod(NS, "other-run", {"harbor-run": "x"}, phase="Pending")

    async def scenario() -> list[Pod]:
        pods = watch(kube_api)
        await pods.start()
        waiting = [asyncio.create_task(pods.wait_for(f"p-{i}", finished, timeout=30)) for i in range(50)]
        await asyncio.sleep(0.3)
        assert not any(task.done() for task in waiting)
        for i in range(50):
            await asyncio.to_thread(kube_api.set_status, NS, f"p-{i}", "Succeeded", exit_code=0)
        done = await asyncio.gather(*waiting)
        assert {p.metadata.name for p in pods.pods()} == {f"p-{i}" for i in range(50)}  # the run's only
        await pods.close()
        return done

    done = asyncio.run(scenario())
    assert [p.metadata.name for p in done] == [f"p-{i}" for i in range(50)]
    assert all(p.status.phase == "Succeeded" for p in done)
    assert verbs(kube_api) == ["list", "watch"]


def test_a_pod_already_finished_is_returned_without_waiting(kube_api):
    """Finished before the list, or seen finishing by the watch before the wait: no time at all
    (``timeout=0``) is still enough."""
    kube_api.add_pod(NS, "early", RUN, phase="Succeeded")
    kube_api.add_pod(NS, "later", RUN, phase="Pending")

    async def scenario() -> tuple[Pod, Pod]:
        pods = watch(kube_api)
        await pods.start()
        early = await pods.wait_for("early", finished, timeout=0)
        await asyncio.to_thread(kube_api.set_status, NS, "later", "Failed", exit_code=1)
        await until(lambda: finished(pods.get("later")))
        later = await pods.wait_for("later", finished, timeout=0)
        await pods.close()
        return early, later

    early, later = asyncio.run(scenario())
    assert (early.status.phase, later.status.phase) == ("Succeeded", "Failed")


def test_a_deleted_pod_is_gone_for_its_waiter_and_for_a_later_one(kube_api):
    kube_api.add_pod(NS, "p-1", RUN, phase="Running")

    async def scenario() -> None:
        pods = watch(kube_api)
        await pods.start()
        waiting = asyncio.create_task(pods.wait_for("p-1", finished, timeout=30))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await asyncio.to_thread(kube_api.delete_pod, NS, "p-1")
        with pytest.raises(PodGone) as gone:
            await waiting
        assert gone.value.name == "p-1"
        with pytest.raises(PodGone):
            await pods.wait_for("p-1", finished, timeout=0)
        await pods.close()

    asyncio.run(scenario())


def test_a_waiter_for_a_pod_not_seen_yet_waits_for_it(kube_api):
    """Created a moment ago, its ADDED not yet through the watch: absent is not gone."""
    async def scenario() -> Pod:
        pods = watch(kube_api)
        await pods.start()
        waiting = asyncio.create_task(pods.wait_for("new", finished, timeout=30))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await asyncio.to_thread(kube_api.add_pod, NS, "new", RUN, "Pending")
        await asyncio.to_thread(kube_api.set_status, NS, "new", "Succeeded", exit_code=0)
        pod = await waiting
        await pods.close()
        return pod

    assert asyncio.run(scenario()).status.phase == "Succeeded"


def test_a_pod_made_again_under_a_deleted_name_is_waited_for_by_its_uid(kube_api):
    """A retried trial's pod has its predecessor's name: while the watch has not seen it, the name
    is a tombstone, which only the uid its create answered can tell from the new pod."""
    kube_api.add_pod(NS, "p-1", RUN, phase="Running")

    async def scenario() -> Pod:
        pods = watch(kube_api)
        await pods.start()
        await asyncio.to_thread(kube_api.delete_pod, NS, "p-1")
        await until(lambda: pods.get("p-1") is None)
        await take_the_watch_down(kube_api)
        again = await asyncio.to_thread(kube_api.add_pod, NS, "p-1", RUN, "Pending")
        with pytest.raises(PodGone):  # without a uid, the tombstone answers
            await pods.wait_for("p-1", finished, timeout=0)
        waiting = asyncio.create_task(pods.wait_for("p-1", finished, timeout=30, uid=again["metadata"]["uid"]))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        kube_api.clear_failures()
        await asyncio.to_thread(kube_api.set_status, NS, "p-1", "Succeeded", exit_code=0)
        pod = await waiting
        await pods.close()
        return pod

    pod = asyncio.run(scenario())
    assert pod.status.phase == "Succeeded" and pod.metadata.uid == kube_api.pods[(NS, "p-1")]["metadata"]["uid"]


@pytest.mark.parametrize("abrupt", [False, True], ids=["ended", "cut"])
def test_a_dropped_watch_resumes_without_losing_what_changed_meanwhile(kube_api, abrupt):
    """The pod finishes while no watch is open; the next watch starts from the last version seen
    and replays it (no relist needed)."""
    kube_api.add_pod(NS, "p-1", RUN, phase="Running")

    async def scenario() -> Pod:
        pods = watch(kube_api)
        await pods.start()
        waiting = asyncio.create_task(pods.wait_for("p-1", finished, timeout=30))
        await take_the_watch_down(kube_api, abrupt)
        await asyncio.to_thread(kube_api.set_status, NS, "p-1", "Succeeded", exit_code=0)
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the watch really is down
        kube_api.clear_failures()
        pod = await waiting
        await pods.close()
        return pod

    assert asyncio.run(scenario()).status.phase == "Succeeded"
    assert verbs(kube_api).count("list") == 1


def test_an_expired_version_is_relisted_and_a_pod_missing_from_the_list_is_gone(kube_api):
    """Down long enough for the server to forget the version it was at (410 Expired): the watcher
    lists again; a pod that finished meanwhile is seen finished, one deleted meanwhile is gone."""
    kube_api.add_pod(NS, "done", RUN, phase="Running")
    kube_api.add_pod(NS, "deleted", RUN, phase="Running")
    seen: list[tuple[str, str]] = []

    async def scenario() -> tuple[Pod, BaseException | None, int]:
        pods = watch(kube_api)
        pods.subscribe(lambda kind, pod: seen.append((kind, pod.metadata.name)))
        await pods.start()
        done = asyncio.create_task(pods.wait_for("done", finished, timeout=30))
        deleted = asyncio.create_task(pods.wait_for("deleted", finished, timeout=30))
        await take_the_watch_down(kube_api)
        await asyncio.to_thread(kube_api.set_status, NS, "done", "Succeeded", exit_code=0)
        await asyncio.to_thread(kube_api.delete_pod, NS, "deleted")
        await asyncio.to_thread(kube_api.compact)
        kube_api.clear_failures()
        pod = await done
        gone = (await asyncio.gather(deleted, return_exceptions=True))[0]
        await pods.close()
        return pod, gone, pods.relists

    pod, gone, relists = asyncio.run(scenario())
    assert pod.status.phase == "Succeeded"
    assert isinstance(gone, PodGone) and gone.name == "deleted"
    assert relists == 1 and verbs(kube_api).count("list") == 2
    assert ("DELETED", "deleted") in seen and ("MODIFIED", "done") in seen


def test_subscribers_see_each_change_and_close_releases_waiters(kube_api):
    kube_api.add_pod(NS, "p-1", RUN, phase="Pending")
    seen: list[tuple[str, str, str]] = []

    async def scenario() -> None:
        pods = watch(kube_api)
        pods.subscribe(lambda kind, pod: seen.append((kind, pod.metadata.name, pod.status.phase)))
        await pods.start()
        await asyncio.to_thread(kube_api.add_pod, NS, "p-2", RUN, "Pending")
        await asyncio.to_thread(kube_api.set_status, NS, "p-1", "Running")
        await asyncio.to_thread(kube_api.delete_pod, NS, "p-2")
        await until(lambda: ("DELETED", "p-2", "Pending") in seen)
        waiting = asyncio.create_task(pods.wait_for("p-1", finished, timeout=30))
        await asyncio.sleep(0.1)
        await pods.close()
        with pytest.raises(WatchClosed):
            await waiting

    asyncio.run(scenario())
    assert seen == [("ADDED", "p-1", "Pending"), ("ADDED", "p-2", "Pending"), ("MODIFIED", "p-1", "Running"),
                    ("MODIFIED", "p-2", "Pending"), ("DELETED", "p-2", "Pending")]
