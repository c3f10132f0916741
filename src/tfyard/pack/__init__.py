"""Container images for a training program: Dockerfile, build, push, local test, Kubernetes.

`make_spec` validates a request up front; `write_context` writes the build context
(Dockerfile, .dockerignore, tfyard wheel, tfyard-cmd.txt, optional Kubernetes manifest);
`docker` runs the docker CLI for --build and --push.
"""

from tfyard.pack.context import write_context
from tfyard.pack.spec import PackSpec, make_spec

__all__ = ["PackSpec", "make_spec", "write_context"]
