"""Object storage (`gs://`, `s3://`), through fsspec (gcsfs, s3fs: the `gcs` and
`s3` extras), with credentials from the environment as those libraries take them:
the client and its errors (`client.py`), and what tpumem writes there
(`uploads.py`). What a command reads from there is reading/object_storage.py's."""
