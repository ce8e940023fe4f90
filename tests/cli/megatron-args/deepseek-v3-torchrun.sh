# DeepSeek-V3 launched with torchrun on 128 nodes x 8 GPUs. Model arguments: the Megatron MoE
# Model Zoo's model_configs/benchmarking/DeepSeek-V3.yaml (yanring/Megatron-MoE-ModelZoo@e865051);
# the layout is uneven pipeline stages (61 layers: 7 on the first rank, 6 on the last, 8 on each
# of the six between) instead of the Zoo's explicit --pipeline-model-parallel-layout, and
# --vocab-size states the tokenizer's vocabulary (hybrid-twin does not read tokenizers).
torchrun --nnodes 128 --nproc-per-node 8 --master-addr node0 --master-port 6000 \
  pretrain_gpt.py \
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 \
  --decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 6 \
  --expert-model-parallel-size 64 --context-parallel-size 1 --expert-tensor-parallel-size 1 \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --sequence-parallel \
  --micro-batch-size 1 --global-batch-size 1024 --seq-length 4096 --max-position-embeddings 4096 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model unsloth/DeepSeek-V3 \
  --vocab-size 129280 \
  --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 --kv-channels 128 \
  --rotary-base 10000 --make-vocab-size-divisible-by 3232 --swiglu --untie-embeddings-and-output-weights \
  --multi-latent-attention --qk-layernorm --num-experts 256 --moe-layer-freq "([0]*3+[1]*58)" \
  --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 \
  --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 8 --moe-grouped-gemm \
  --moe-router-group-topk 4 --moe-router-num-groups 8 --moe-router-topk-scaling-factor 2.5 \
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
  --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 \
  --mtp-num-layers 1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
  --moe-token-dispatcher-type alltoall --bf16 --lr 2.2e-4 --save /checkpoints/dsv3
