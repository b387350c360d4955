"""elastic.progress loads on its own: what every interpreter under a sidecar pays at its start."""

import os
import subprocess
import sys
import textwrap
import unittest

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(code, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("ELASTIC_")}
    e.update(env, PYTHONPATH=PACKAGE_DIR)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=60)


class LoadedOnItsOwn(unittest.TestCase):
    def test_sitecustomize_loads_it_without_the_package(self):
        # The package's __init__ imports the checkpoints, and they import
        # torch: far too much for every interpreter's start.
        out = run_script("""
            import sys, sitecustomize
            progress = sitecustomize.progress_module()
            print(progress.__name__, progress.attached(), "torch" in sys.modules, "elastic.checkpoint" in sys.modules)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "elastic.progress False False False")

    def test_the_package_then_uses_the_same_module(self):
        out = run_script("""
            import sitecustomize
            first = sitecustomize.progress_module()
            import elastic, elastic.progress
            print(elastic.progress is first, elastic.checkpoint._progress is first)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "True True")

    def test_a_page_descriptor_that_is_not_one_is_ignored(self):
        out = run_script("""
            import sitecustomize
            print(sitecustomize.progress_module().attached())
        """, ELASTIC_PROGRESS_FD="99")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "False")


if __name__ == "__main__":
    unittest.main()
