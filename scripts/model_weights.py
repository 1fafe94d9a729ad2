"""Count each model stage's parameters from the model's published architecture, for data/models.yml.

    VENV/bin/python scripts/model_weights.py      (an engine venv: torch and transformers; nothing is downloaded)

Builds Qwen3-Omni-30B-A3B-Instruct on torch's meta device (no memory, no weights) from the fields of its
config.json that size the weights, and prints each top-level module's parameter count (thinker, talker, code2wav)
and its bf16 bytes: the planner's sizing (weights per GPU against a stage's gpu_memory_utilization share) reads them.
The sum is the published checkpoint's size (about 70.5 GB of bf16 safetensors).
"""

from __future__ import annotations

import torch
from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

# The architecture numbers of Qwen/Qwen3-Omni-30B-A3B-Instruct's config.json: the fields that size the weights.
THINKER = {
    "text_config": {"hidden_size": 2048, "intermediate_size": 768, "moe_intermediate_size": 768, "num_experts": 128,
                    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_attention_heads": 32,
                    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 152064,
                    "shared_expert_intermediate_size": 0, "decoder_sparse_step": 1, "mlp_only_layers": [],
                    "tie_word_embeddings": False},
    "audio_config": {"d_model": 1280, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
                     "num_mel_bins": 128, "output_dim": 2048, "downsample_hidden_size": 480,
                     "max_source_positions": 1500, "n_window": 50, "n_window_infer": 800, "conv_chunksize": 500},
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "in_channels": 3, "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]},
}
TALKER = {
    "text_config": {"hidden_size": 1024, "intermediate_size": 2048, "moe_intermediate_size": 384, "num_experts": 128,
                    "num_experts_per_tok": 6, "num_hidden_layers": 20, "num_attention_heads": 16,
                    "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 3072,
                    "shared_expert_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "code_predictor_config": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
                              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                              "vocab_size": 2048, "num_code_groups": 16},
    "thinker_hidden_size": 2048, "accept_hidden_layer": 24, "num_code_groups": 16, "spatial_merge_size": 2,
    "position_id_per_seconds": 13, "seconds_per_chunk": 2,
}
CODE2WAV = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 8, "num_attention_heads": 16,
            "num_key_value_heads": 16, "codebook_size": 2048, "codebook_dim": 512, "decoder_dim": 1536,
            "num_quantizers": 16, "semantic_codebook_size": 4096, "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2], "sliding_window": 72, "vector_quantization_hidden_dimension": 512}


def main() -> None:
    config = Qwen3OmniMoeConfig(thinker_config=THINKER, talker_config=TALKER, code2wav_config=CODE2WAV)
    with torch.device("meta"):
        model = Qwen3OmniMoeForConditionalGeneration(config)
    counts = {name: sum(p.numel() for p in child.parameters()) for name, child in model.named_children()}
    print("Qwen/Qwen3-Omni-30B-A3B-Instruct:")
    print("  parameters: {" + ", ".join(f"{name}: {count}" for name, count in counts.items()) + "}")
    print(f"  # total {sum(counts.values()):,} parameters, {sum(counts.values()) * 2 / 1e9:.1f} GB in bf16")


if __name__ == "__main__":
    main()
