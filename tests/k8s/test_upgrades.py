"""Upgrades never restart a training run (issue 22, item 4), on the rendered chart: the trainer Job
is named from the release and trainer.runId and its immutable template carries nothing a chart
upgrade changes by itself; a new model source is fetched into its own directory; the auth Secret
is the release's own. Also where Kueue's queue label goes and the refusal of RWX storage without a
named class (item 5)."""

from __future__ import annotations

import shutil

import yaml

from tests.k8s.conftest import CHART, by_kind, helm, render


def objects(*args: str, values: str = "values.yaml") -> list[dict]:
    return [o for o in yaml.safe_load_all(render(values, *args)) if o]


def component(objs: list[dict], kind: str, name: str) -> list[dict]:
    return [o for o in by_kind(objs, kind) if o["metadata"]["labels"].get("app.kubernetes.io/component") == name]


def trainer_job(objs: list[dict]) -> dict:
    [job] = component(objs, "Job", "trainer")
    return job


def env_of(pod: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_trainer_job_is_named_for_the_run_not_for_its_template():
    base = trainer_job(objects())
    assert base["metadata"]["name"] == "rl-rlstack-trainer"
    for change in (["--set", "trainer.env.RLSTACK_TRAINER_STEPS=5"], ["--set", "images.trainer.tag=v2"],
                   ["-f", str(CHART / "values-agent.yaml")]):
        assert trainer_job(objects(*change))["metadata"]["name"] == "rl-rlstack-trainer", change
    multi = trainer_job(objects("--set", "trainer.nodes=2", "--set", "trainer.runId=r2"))
    assert multi["metadata"]["name"] == "rl-rlstack-trainer-r2"


def test_trainer_template_holds_nothing_a_chart_upgrade_or_another_env_changes(tmp_path):
    """Chart version and appVersion labels, and the first env's name, were in the template: every
    upgrade replaced the Job. Images pinned, a new chart version renders the same template."""
    pinned = ["--set", "images.trainer.tag=1.0", "--set", "images.proxy.tag=1.0", "--set", "images.vllm.tag=1.0"]
    before = trainer_job(objects(*pinned))["spec"]["template"]
    chart = tmp_path / "rlstack"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    (chart / "Chart.yaml").write_text(yaml.safe_dump({**meta, "version": "9.9.9", "appVersion": "9.9.9"}))
    done = helm("template", "rl", str(chart), "--namespace", "rl", "-f", str(chart / "values.yaml"), *pinned)
    assert done.returncode == 0, done.stderr
    upgraded = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert trainer_job(upgraded)["metadata"]["labels"]["helm.sh/chart"] == "rlstack-9.9.9"  # mutable metadata may change
    assert trainer_job(upgraded)["spec"]["template"] == before
    agent = trainer_job(objects(*pinned, "-f", str(CHART / "values-agent.yaml")))["spec"]["template"]
    assert agent == before  # the first env went from arithmetic to agent: the eval URL is the stable alias
    assert env_of(before)["RLSTACK_TRAINER_EVALUATION__URL"] == "http://rl-rlstack-eval:80"


def test_the_eval_alias_follows_the_first_env_server():
    for values, env in (([], "env-arithmetic"), (["-f", str(CHART / "values-agent.yaml")], "env-agent")):
        objs = objects(*values)
        [alias] = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "rl-rlstack-eval"]
        assert alias["spec"]["selector"]["app.kubernetes.io/component"] == env
        assert alias["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
        [deployment] = component(objs, "Deployment", env)
        assert {"name": "http", "containerPort": 8300} in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]


def test_a_new_run_id_is_a_new_run_beside_the_old_one():
    objs = objects("--set", "trainer.runId=r2", "-f", str(CHART / "values-agent.yaml"))
    job = trainer_job(objs)
    assert job["metadata"]["name"] == "rl-rlstack-trainer-r2"
    trainer = env_of(job["spec"]["template"])
    assert trainer["RLSTACK_TRAINER_RUN_DIR"] == "/data/runs/rl-r2" and trainer["RLSTACK_TRAINER_SYNC__WEIGHTS_DIR"] == "/data/weights/rl-r2"
    [inference] = component(objs, "Deployment", "inference")
    assert env_of(inference["spec"]["template"])["RLSTACK_INFERENCE_WEIGHTS_DIR"] == "/data/weights/rl-r2"  # base model again
    [batcher] = component(objs, "Deployment", "batcher")
    assert env_of(batcher["spec"]["template"])["RLSTACK_BATCHER_DATA_DIR"] == "/data/batcher/rl-r2"  # a fresh queue
    [env] = component(objs, "Deployment", "env-agent")
    assert env_of(env["spec"]["template"])["RLSTACK_ENV_RUN_ID"] == "rl-r2"
    default = env_of(trainer_job(objects())["spec"]["template"])
    assert default["RLSTACK_TRAINER_RUN_DIR"] == "/data/runs/rl"  # no runId: the paths a release always had
    refused = helm("template", "rl", str(CHART), "--set", "trainer.runId=Bad_Id")
    assert refused.returncode != 0 and "/trainer/runId" in refused.stderr


def test_kueue_queue_label_is_on_the_trainer_job_kueue_reads():
    objs = objects("--set", "trainer.kueue.queueName=team-a")
    job = trainer_job(objs)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]
    assert "kueue.x-k8s.io/queue-name" not in trainer_job(objects())["metadata"]["labels"]
    multi = trainer_job(objects("--set", "trainer.kueue.queueName=team-a", "--set", "trainer.nodes=2"))
    assert multi["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def model_dir(*args: str) -> str:
    [job] = component(objects(*args), "Job", "model")
    return env_of(job["spec"]["template"])["RLSTACK_MODEL_DIR"]


def test_each_model_source_gets_its_own_directory():
    """A new source used to be fetched into model.path itself, deleting and renaming the directory
    under running replicas; now it lands beside it and the pods move over as they restart."""
    hub = model_dir()
    assert hub == model_dir("--set", "trainer.env.RLSTACK_TRAINER_STEPS=5")  # same source, same directory
    other = model_dir("--set", "model.source.hub.revision=v2")
    copied = model_dir("--set", "model.source.type=hostPath", "--set", "model.source.hostPath=/models/demo")
    assert len({hub, other, copied}) == 3 and all(d.startswith("/data/models/policy-") for d in (hub, other, copied))
    objs = objects("--set", "model.source.hub.revision=v2")
    for name in ("inference", "trainer"):
        kind = "Job" if name == "trainer" else "Deployment"
        [workload] = component(objs, kind, name)
        assert env_of(workload["spec"]["template"])[f"RLSTACK_{name.upper()}_MODEL"] == other


def test_auth_secret_is_the_releases_own_and_no_render_carries_its_values():
    names = set()
    for release in ("rl", "other"):
        done = helm("template", release, str(CHART), "--namespace", "rl", "--set", "auth.create=true")
        assert done.returncode == 0, done.stderr
        objs = [o for o in yaml.safe_load_all(done.stdout) if o]
        assert by_kind(objs, "Secret") == []  # nothing a GitOps render could regenerate
        [hook] = component(objs, "Job", "auth-init")
        assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        command = hook["spec"]["template"]["spec"]["containers"][0]["command"]
        name = command[command.index("--name") + 1]
        refs = {e["valueFrom"]["secretKeyRef"]["name"] for d in by_kind(objs, "Deployment")
                for e in d["spec"]["template"]["spec"]["containers"][0]["env"] if "secretKeyRef" in e.get("valueFrom", {})}
        assert refs == {name}
        names.add(name)
    assert names == {"rl-rlstack-auth", "other-rlstack-auth"}  # two releases in one namespace no longer collide
    existing = objects("--set", "auth.existingSecret=team-auth")
    assert not component(existing, "Job", "auth-init")


def test_rwx_storage_needs_a_named_class():
    refused = helm("template", "rl", str(CHART), "--set", "sharedStorage.storageClass=")
    assert refused.returncode != 0 and "sharedStorage.storageClass: name a ReadWriteMany storage class" in refused.stderr
    for ok in (["--set", "sharedStorage.storageClass=efs-sc"], ["--set", "sharedStorage.storageClass=", "--set", "sharedStorage.existingClaim=mine"],
               ["--set", "sharedStorage.storageClass=", "--set", "sharedStorage.accessMode=ReadWriteOnce"]):
        assert helm("template", "rl", str(CHART), *ok).returncode == 0, ok
    [claim] = by_kind(objects("--set", "sharedStorage.storageClass=efs-sc"), "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == "efs-sc" and claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_notes_say_how_to_start_a_run_and_where_a_pending_claim_is_explained():
    notes = helm("install", "rl", str(CHART), "--dry-run", "--namespace", "rl", "--set", "auth.create=true",
                 "--set", "sharedStorage.storageClass=efs-sc", "--set", "trainer.runId=r2").stdout
    assert "It is run rl-r2" in notes and "A new training run: --set trainer.runId=<new id>" in notes
    assert "asks ReadWriteMany of class efs-sc" in notes and "rlstack doctor --run-prefix rl-r2" in notes
    one_node = helm("install", "rl", str(CHART), "--dry-run", "--namespace", "rl", "--set", "auth.create=true",
                    "--set", "sharedStorage.accessMode=ReadWriteOnce").stdout
    assert "asks ReadWriteMany" not in one_node and "must land on one node" in one_node
