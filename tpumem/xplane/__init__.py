"""Reading XSpace profiles (`*.xplane.pb`) without TensorFlow or JAX."""
