"""Reading XSpace profiles (`*.xplane.pb`) without TensorFlow or JAX."""

XPLANE_SUFFIX = ".xplane.pb"
