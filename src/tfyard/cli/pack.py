"""`tfyard pack`: a container image for a training script, with its run and push commands."""

from __future__ import annotations

import argparse

from tfyard import platform
from tfyard.pack.spec import DATA_DIR, OUTPUT_DIR

_EPILOG = """Writes into the code directory's parent (or --out): Dockerfile, .dockerignore,
the tfyard wheel, tfyard-cmd.txt (platform, local-test, build and push commands) and, with
--k8s, tfyard-k8s.yaml: an indexed Job and its headless Service, for `kubectl apply -f`; its
header says how to watch the job and follow its logs. Each file starts with pack's header;
a file of the same name that lacks it (your own Dockerfile) is never replaced: pack refuses
in one line unless --force, which keeps it as NAME.bak. The registry password for --push
--registry_user comes from TFYARD_REGISTRY_PASSWORD or stdin, never from a flag."""


def register(commands) -> None:
    pack = commands.add_parser(
        "pack", help="write a Dockerfile and run commands for a training script; build, push",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def flag(name, **kwargs):
        spellings = dict.fromkeys([f"--{name}", f"--{name.replace('_', '-')}"])
        pack.add_argument(*spellings, dest=name, **kwargs)

    flag("code_path", required=True, metavar="DIR", help="directory with the training code")
    flag("main", required=True, metavar="FILE", help="training script, relative to DIR")
    flag("image", required=True, metavar="NAME[:TAG]", help="image to build (tag: latest)")
    flag("base_image", metavar="IMAGE",
         help="default: tensorflow/tensorflow:<installed TF version>[-gpu]")
    flag("gpu", action="store_true", help="GPU base image, `--gpus all` in the local test")
    flag("requirements", metavar="FILE", help="pip requirements installed into the image")
    flag("train_params", default="", metavar="'ARGS'",
         help="arguments for the script as one string: --train_params '--batch_size 64'")
    pack.dash_values = frozenset(("--train_params", "--train-params"))
    flag("registry", metavar="HOST/NS", help="registry prefix for the image name")
    flag("registry_user", metavar="USER", help="with --push: `docker login` as USER first")
    flag("out", metavar="DIR", help="where to write the files (default: DIR's parent)")
    flag("force", action="store_true", help="replace files of the same names that pack did "
         "not write (each kept as NAME.bak); without it pack refuses and writes nothing")
    flag("k8s", metavar="WORKERS[,PS]", help="also write a Kubernetes indexed Job manifest "
         "(with PS: a chief too)")
    flag("name", metavar="NAME", help="with --k8s: the Job's name (default: from the image)")
    flag("namespace", metavar="NS", help="with --k8s: the namespace (default: kubectl's)")
    flag("cpus", metavar="N", help="with --k8s: CPUs each pod requests (4, 0.5, 500m)")
    flag("memory", metavar="SIZE", help="with --k8s: memory each pod requests (16Gi)")
    flag("data_volume", metavar="pvc:CLAIM|host:/PATH",
         help=f"with --k8s: the data, mounted read-only at {DATA_DIR} (--data_dir)")
    flag("output_volume", metavar="pvc:CLAIM|host:/PATH",
         help=f"with --k8s: mounted at {OUTPUT_DIR} (--output_dir); every member writes "
         "there, so it must be one volume that every pod can reach: a ReadWriteMany claim, or "
         "a host path shared by every node")
    platform.add_platform_flag(
        pack, "output_dir", metavar="s3|gs://BUCKET/PREFIX",
        help="with --k8s: the run goes to this bucket prefix instead of an output volume "
        "(the chief writes a copy on its disk and uploads it; a restarted pod resumes from "
        "the bucket)")
    flag("credentials_secret", metavar="SECRET",
         help="with --k8s: a Kubernetes Secret whose keys become each pod's environment, for "
         "the bucket's credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
         "AWS_ENDPOINT_URL_S3, ...; for gs://, GKE's Workload Identity needs none); never "
         "written into the manifest")
    flag("queue", metavar="NAME",
         help="with --k8s: the Kueue LocalQueue the Job waits in; the Job is labelled "
         "kueue.x-k8s.io/queue-name=NAME and created suspended, and its pods start when Kueue "
         "admits it (a DNS-1123 name of at most 63 characters)")
    flag("priority_class", metavar="NAME",
         help="with --queue: the Kueue WorkloadPriorityClass that orders the Job among "
         "queued ones (label kueue.x-k8s.io/priority-class)")
    flag("test_data_path", metavar="P", help="host data directory for the local test command")
    flag("test_output_path", metavar="P", help="host output directory for the local test")
    flag("build", action="store_true", help="run `docker build`")
    flag("push", action="store_true", help="run `docker push` (and login, see below)")
    pack.set_defaults(func=run_pack)


def run_pack(args) -> int:
    from tfyard.pack import docker, make_spec, write_context
    from tfyard.pack.commands import CMD_FILE
    from tfyard.replace import check_writable

    spec = make_spec(
        code_path=args.code_path, main=args.main, image=args.image,
        base_image=args.base_image, gpu=args.gpu, requirements=args.requirements,
        train_params=args.train_params, registry=args.registry, out=args.out, k8s=args.k8s,
        test_data_path=args.test_data_path, test_output_path=args.test_output_path,
        registry_user=args.registry_user, name=args.name, namespace=args.namespace,
        cpus=args.cpus, memory=args.memory, data_volume=args.data_volume,
        output_volume=args.output_volume, output_dir=args.output_dir,
        credentials_secret=args.credentials_secret, queue=args.queue,
        priority_class=args.priority_class,
    )
    check_writable(str(spec.out), "--out", "into")
    written, backups = write_context(spec, force=args.force)
    for path in backups:
        print(f"kept your {path.name.partition('.bak')[0]} as {path}")
    for path in written:
        print(f"wrote {path}")
    print((spec.out / CMD_FILE).read_text(encoding="utf-8"), end="")
    if args.build or args.push:
        docker.require_engine(spec)
    if args.build:
        docker.build(spec)
    if args.push:
        docker.push(spec)
    return 0
