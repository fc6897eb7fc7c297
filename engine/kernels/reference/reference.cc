// Naive reference kernels; see reference.h.
