"""The training script the Kubernetes tests' stand-in of Paddle's launcher
starts in place of an image's: it writes its environment down for the
generation, as the tests' other trainers do, and becomes the toy trainer."""

import os
import sys

toy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "toytrainer.sh")
os.execv("/bin/sh", ["/bin/sh", "-c",
                     'mkdir -p "$TOY_DIR" && env >"$TOY_DIR/.env-$POD_NAME" && '
                     'mv "$TOY_DIR/.env-$POD_NAME" "$TOY_DIR/env-$POD_NAME-$ELASTIC_GENERATION" && exec "$0"', toy] + sys.argv[1:])
