"""The fork server's process: `python -m ksearch.eval.isolation.zygote CONFIG` (ForkServer starts it).

A module run from its file, not `python -c`: the bottom frame of every candidate's process is then this file.
The audit hook walks the frames of whatever starts a program, and a nameless `<string>` frame at the bottom
of the stack counted as candidate code: on the H200 it refused the compiler that ksearch's own CUDA builder
starts, and every CUDA candidate failed as INCORRECT_TAMPERING."""

from ksearch.eval.isolation.forkserver import zygote_main

if __name__ == "__main__":
    zygote_main()
