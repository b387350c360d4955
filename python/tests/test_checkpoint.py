"""elastic.checkpoint outside a sidecar: the file alone."""

import os
import tempfile
import unittest

import elastic


class WithTheFileAlone(unittest.TestCase):
    def test_a_save_comes_back_from_the_file(self):
        import torch

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt")
            self.assertIsNone(elastic.load(path))
            elastic.save({"w": torch.arange(4.0), "step": 7}, path)
            elastic.flush()
            got = elastic.load(path)
            self.assertEqual(got["step"], 7)
            self.assertTrue(torch.equal(got["w"], torch.arange(4.0)))

    def test_fenced_replace_renames_outside_a_generation(self):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "new"), os.path.join(d, "ckpt")
            with open(src, "w") as f:
                f.write("x")
            elastic.fenced_replace(src, dst)
            self.assertFalse(os.path.exists(src))
            with open(dst) as f:
                self.assertEqual(f.read(), "x")

    def test_errors_have_their_public_names(self):
        for cls in (elastic.CheckpointError, elastic.FencedError, elastic.TooLargeError, elastic.GenerationOver):
            self.assertEqual(cls.__module__, "elastic", cls)
        self.assertTrue(issubclass(elastic.FencedError, elastic.CheckpointError))

    def test_quiet_checks_its_argument(self):
        with self.assertRaises((TypeError, ValueError)):
            with elastic.quiet(-1):
                pass


if __name__ == "__main__":
    unittest.main()
