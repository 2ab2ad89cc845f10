"""How a candidate's process is made and contained: the fork server, the kernel's walls
(mount namespace, uid, Landlock, seccomp) and reaping."""
