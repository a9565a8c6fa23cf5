"""``python -m nvtx_plugins_tf``: the ``nvtx-tf`` command line (see nvtx_plugins_tf.cli)."""

import sys

from nvtx_plugins_tf.cli import main

if __name__ == "__main__":
    sys.exit(main())
