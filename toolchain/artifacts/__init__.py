"""Identity and location of every artifact: the one place that names keys and paths.

Stages ask this package what a thing is called and where it lives; none builds a key or a cache path itself.

Modules
-------
- ``settings`` (``toolchain/settings.py``): the environment variables, including ``TOOLCHAIN_CACHE``.
- ``recipe``: ``Recipe`` (the quantization recipe) and ``QUANTIZER``.
- ``keys``: source identity, engine key, profile id, quantized-checkpoint key, timing-cache key, CI job ids.
- ``layout``: ``CacheLayout``, every path under the cache root.
- ``cell``: ``CellArtifacts``, the keys and paths of one matrix cell from one source identity.
- ``source``: the local directory of a spec's source checkpoint (``hf://`` sources are downloaded).
- ``bench_result``: ``BenchResult``, the bench result document (bench writes it; report, diagnose and ``plan
  --measured`` read it).

Identity (sha256 over canonical JSON; ``keys`` has the field lists)
-------------------------------------------------------------------
=========================  ==========================================================  ===================
key                        stands for                                                  used as
=========================  ==========================================================  ===================
source identity            local checkpoint content digest, or hf repo@revision        part of all below
engine key                 source + quantizer + GPU + TP/PP + shape + build fields     registry key (engine
                                                                                       or LLM-API profile)
profile id                 engine key + runtime fields                                 repo/bench provenance
quantized-checkpoint key   source + recipe + quantizer                                 registry key, cache
                                                                                       dir, CI job ``q-…``
timing-cache key           GPU + TensorRT-LLM + TensorRT versions                      registry key
build job id               ``<spec name>--<cell id>``                                  CI job id
=========================  ==========================================================  ===================

Cache layout (root: ``$TOOLCHAIN_CACHE``, default ``~/.cache/toolchain``)
------------------------------------------------------------------------
::

    registry/                                       default local registry (layout: toolchain.registry)
    quantized/<spec>-<weights>-tp<T>pp<P>-<qkey12>/ one quantized checkpoint, written atomically
        trtllm/                                     TRT-LLM checkpoint + tokenizer (input of trtllm-build)
        hf/                                         unified HF checkpoint + tokenizer (LLM API)
        manifest.json                               inputs, recipe, digests, versions, accuracy
    engines/<engine-key>/                           an engine fetched from a registry for serving
    builds/                                         temporary work dirs of builds (removed when done)
    logs/                                           logs that outlive a command:
    logs/build-<cell-id>-<key12>.log                  build log (trtllm-build and converter output)
    logs/tritonserver-<unix-time>.log                 `toolchain serve` log
    up/<spec>-<cell-id>/                            `toolchain up`: repo/, tritonserver.log, bench.json, report/
    dynamo/<spec>-<time>-<pid>/                     `toolchain dynamo up`: logs, discovery, model card
    triton-backends/<python-X.Y>/                   Triton Python-backend dir for this interpreter's stub
    statcache.json                                  sha256 of checkpoint files by (path, size, mtime, inode)
    statcache-blake3.json                           blake3 of files pushed to a registry
    verified-blobs.json                             registry blobs verified since they last changed
    staging/<sha256-of-path-32>.path                where a live pull (any staged write) stages; `cache gc` reads it

The tokenizer a cell serves with is ``quantized/.../trtllm/`` when present, else the source checkpoint's.
``tests/test_artifacts.py`` holds this layout against ``CacheLayout``. docs/cache-layout.md explains it.
"""
