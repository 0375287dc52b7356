"""The JAX adapter's package: adapter.py (the adapter), array_hooks.py (where
JAX makes arrays), buffer_book.py (the buffers jax.Arrays hold) and
framework.py (what tpumem knows of JAX, as plain data). Importing the
package loads none of them, and never JAX: inside it `import jax` is the
framework's (imports are absolute)."""
