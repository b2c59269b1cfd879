"""A short check of chapter 8's GPU paths (SPDL transfer, nvJPEG feed, bf16 ResNet-50) on a GPU host."""
import sys
import time

from datajourney import gil

if __name__ == "__main__":
    t = time.perf_counter()
    res = gil.run(n_images=400, primitive_images=64, concurrency=[1, 16], repeats=1, dataloader_workers=[8],
                  thread_concurrency=[8], loader_batches=3, start_methods=["fork"], startup_workers=[1],
                  startup_paths=[0], ipc_batch_sizes=[32], model_steps=3, model_warmup=2,
                  data_dir=sys.argv[1], run_dir=sys.argv[2], progress=False)
    for k, v in res.tables.items():
        print(k)
        print(v.to_string(max_cols=20)[:3000])
    print(res.metadata["seconds"], res.metadata["decoders"], res.metadata["image_bytes"], res.metadata["ceiling"])
    print("smoke seconds", time.perf_counter() - t)
