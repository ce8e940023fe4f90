# Llama 3 8B in FP8 as Megatron-LM's example launches it (NVIDIA/Megatron-LM@d98e8a64dd:
# examples/llama/train_llama3_8b_h100_fp8.sh), its shell variables expanded for one node of 8 GPUs
# and the mock-data branch (which states the vocabulary: --vocab-size 128256).
torchrun --nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 29500 \
  pretrain_gpt.py \
  --use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
  --group-query-attention --num-query-groups 8 --kv-channels 128 --seq-length 8192 \
  --max-position-embeddings 8192 --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 \
  --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 \
  --attention-backend fused --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear \
  --micro-batch-size 1 --global-batch-size 128 --train-samples 1953125000 --lr-decay-samples 1949218748 \
  --lr-warmup-samples 3906252 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 \
  --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 \
  --grad-reduce-in-bf16 --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc \
  --empty-unused-memory-level 1 --exit-duration-in-mins 235 \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
  --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather \
  --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel \
  --mock-data --tokenizer-type NullTokenizer --vocab-size 128256 \
  --data-cache-path benchmark_cache_llama3_8b_fp8 --tiktoken-pattern v2 --split '99,1,0' \
  --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 \
  --log-interval 1 --save checkpoints/llama3_8b_fp8 --load checkpoints/llama3_8b_fp8
