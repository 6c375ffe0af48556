"""timm's registered ViTs and DeiTs that lg can name in a load line, as data.

A single-file ViT's load line names the registered timm model whose
architecture the file has (`timm_family.TimmAdapter.load_call`, through
`vit.VIT`'s `registered`). Reading timm's registry imports torch and timm,
which `lg inspect` of a file must not
(tests/test_startup.py), so the registry is kept here as a table:
tests/test_timm_names.py reads it again from the installed timm and checks
that it is equal (regenerate it with that test's `registered_plain_vits`).

Only models built by VisionTransformer (or the distilled DeiT) from keyword
arguments lg reads (`USABLE_KWARGS`) are listed: one with another activation,
norm or pooling ("map") has an architecture no safetensors file says. The
one norm kept apart is timm's CLIP ViTs' (`REGISTERED_CLIP_VITS`): LayerNorm
with PyTorch's eps of 1e-5 where every other ViT's is 1e-6, which no tensor
shows; lg builds a ViT with norm_pre as one of them (`vit.CLIP_MODEL_NAME`),
since timm registers no other pre-norm ViT of LayerNorms, and its load line
names one of them, so that it computes what lg's model and the source do.
"""

from __future__ import annotations

import dataclasses

from ..preprocessing import Preprocessing, from_record

# The keyword arguments of timm's VisionTransformer that lg reads from a file.
USABLE_KWARGS = ("depth", "embed_dim", "num_heads", "mlp_ratio", "patch_size", "img_size", "class_token",
                 "reg_tokens", "no_embed_class", "pre_norm", "final_norm", "fc_norm", "qkv_bias", "qk_norm",
                 "proj_bias", "init_values", "global_pool")

# Names timm's _create_vision_transformer treats by name when it loads weights
# (siglip: non-strictly unless pooling "map"; radio, flexi: other resampling):
# not listed, so a load line never names them.
SPECIAL_VARIANTS = ("siglip", "radio", "flexi")

# VisionTransformer's own defaults for what an entry point does not pass.
VISION_TRANSFORMER_DEFAULTS = {"depth": 12, "embed_dim": 768, "num_heads": 12, "mlp_ratio": 4.0, "patch_size": 16,
                               "img_size": 224, "class_token": True, "reg_tokens": 0, "no_embed_class": False,
                               "pre_norm": False, "final_norm": True, "fc_norm": None, "qkv_bias": True,
                               "qk_norm": False, "proj_bias": True, "init_values": None, "global_pool": "token"}

# name -> (kind: "vit" or "deit-distilled", the arguments its entry point
# passes, with the image size of its default pretrained config).
REGISTERED_VITS: dict[str, tuple[str, dict]] = {
    'deit3_base_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 224}),
    'deit3_base_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 384}),
    'deit3_huge_patch14_224': ('vit', {'patch_size': 14, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 224}),
    'deit3_large_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 224}),
    'deit3_large_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 384}),
    'deit3_medium_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 224}),
    'deit3_small_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 224}),
    'deit3_small_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'no_embed_class': True, 'init_values': 1e-06, 'img_size': 384}),
    'deit_base_distilled_patch16_224': ('deit-distilled', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 224}),
    'deit_base_distilled_patch16_384': ('deit-distilled', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 384}),
    'deit_base_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 224}),
    'deit_base_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 384}),
    'deit_small_distilled_patch16_224': ('deit-distilled', {'patch_size': 16, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 224}),
    'deit_small_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 224}),
    'deit_tiny_distilled_patch16_224': ('deit-distilled', {'patch_size': 16, 'embed_dim': 192, 'depth': 12, 'num_heads': 3, 'img_size': 224}),
    'deit_tiny_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 192, 'depth': 12, 'num_heads': 3, 'img_size': 224}),
    'vit_base_patch14_dinov2': ('vit', {'patch_size': 14, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'init_values': 1e-05, 'img_size': 518}),
    'vit_base_patch14_reg1_tipsv2': ('vit', {'patch_size': 14, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'init_values': 1.0, 'reg_tokens': 1, 'no_embed_class': True, 'img_size': 448}),
    'vit_base_patch14_reg4_dinov2': ('vit', {'patch_size': 14, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'init_values': 1e-05, 'reg_tokens': 4, 'no_embed_class': True, 'img_size': 518}),
    'vit_base_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 224}),
    'vit_base_patch16_224_miil': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'qkv_bias': False, 'img_size': 224}),
    'vit_base_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 384}),
    'vit_base_patch16_gap_224': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 16, 'class_token': False, 'global_pool': 'avg', 'fc_norm': False, 'img_size': 224}),
    'vit_base_patch16_plus_240': ('vit', {'patch_size': 16, 'embed_dim': 896, 'depth': 12, 'num_heads': 14, 'init_values': 1e-05, 'img_size': 240}),
    'vit_base_patch16_reg4_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'class_token': False, 'no_embed_class': True, 'global_pool': 'avg', 'reg_tokens': 4, 'img_size': 256}),
    'vit_base_patch32_224': ('vit', {'patch_size': 32, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 224}),
    'vit_base_patch32_384': ('vit', {'patch_size': 32, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 384}),
    'vit_base_patch32_plus_256': ('vit', {'patch_size': 32, 'embed_dim': 896, 'depth': 12, 'num_heads': 14, 'init_values': 1e-05, 'img_size': 256}),
    'vit_base_patch8_224': ('vit', {'patch_size': 8, 'embed_dim': 768, 'depth': 12, 'num_heads': 12, 'img_size': 224}),
    'vit_betwixt_patch16_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 640, 'depth': 12, 'num_heads': 10, 'class_token': False, 'global_pool': 'avg', 'qkv_bias': False, 'init_values': 1e-06, 'fc_norm': False, 'img_size': 256}),
    'vit_betwixt_patch16_reg1_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 640, 'depth': 12, 'num_heads': 10, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 256}),
    'vit_betwixt_patch16_reg4_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 640, 'depth': 12, 'num_heads': 10, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 4, 'global_pool': 'avg', 'img_size': 256}),
    'vit_betwixt_patch16_reg4_gap_384': ('vit', {'patch_size': 16, 'embed_dim': 640, 'depth': 12, 'num_heads': 10, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 4, 'global_pool': 'avg', 'img_size': 384}),
    'vit_giant_patch14_224': ('vit', {'patch_size': 14, 'embed_dim': 1408, 'mlp_ratio': 4.363636363636363, 'depth': 40, 'num_heads': 16, 'img_size': 224}),
    'vit_giant_patch16_gap_224': ('vit', {'patch_size': 16, 'embed_dim': 1408, 'depth': 40, 'num_heads': 16, 'mlp_ratio': 4.363636363636363, 'class_token': False, 'global_pool': 'avg', 'fc_norm': False, 'img_size': 224}),
    'vit_gigantic_patch14_224': ('vit', {'patch_size': 14, 'embed_dim': 1664, 'mlp_ratio': 4.923076923076923, 'depth': 48, 'num_heads': 16, 'img_size': 224}),
    'vit_huge_patch14_224': ('vit', {'patch_size': 14, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16, 'img_size': 224}),
    'vit_huge_patch14_gap_224': ('vit', {'patch_size': 14, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16, 'class_token': False, 'global_pool': 'avg', 'fc_norm': False, 'img_size': 224}),
    'vit_huge_patch16_gap_448': ('vit', {'patch_size': 16, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16, 'class_token': False, 'global_pool': 'avg', 'fc_norm': False, 'img_size': 448}),
    'vit_large_patch14_224': ('vit', {'patch_size': 14, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'img_size': 224}),
    'vit_large_patch14_dinov2': ('vit', {'patch_size': 14, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'init_values': 1e-05, 'img_size': 518}),
    'vit_large_patch14_reg1_tipsv2': ('vit', {'patch_size': 14, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'init_values': 1.0, 'reg_tokens': 1, 'no_embed_class': True, 'img_size': 448}),
    'vit_large_patch14_reg4_dinov2': ('vit', {'patch_size': 14, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'init_values': 1e-05, 'reg_tokens': 4, 'no_embed_class': True, 'img_size': 518}),
    'vit_large_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'img_size': 224}),
    'vit_large_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'img_size': 384}),
    'vit_large_patch32_224': ('vit', {'patch_size': 32, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'img_size': 224}),
    'vit_large_patch32_384': ('vit', {'patch_size': 32, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16, 'img_size': 384}),
    'vit_little_patch16_reg1_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 320, 'depth': 14, 'num_heads': 5, 'init_values': 1e-05, 'mlp_ratio': 5.6, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 256}),
    'vit_little_patch16_reg4_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 320, 'depth': 14, 'num_heads': 5, 'init_values': 1e-05, 'mlp_ratio': 5.6, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 4, 'global_pool': 'avg', 'img_size': 256}),
    'vit_medium_patch16_gap_240': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'class_token': False, 'global_pool': 'avg', 'qkv_bias': False, 'init_values': 1e-06, 'fc_norm': False, 'img_size': 240}),
    'vit_medium_patch16_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'class_token': False, 'global_pool': 'avg', 'qkv_bias': False, 'init_values': 1e-06, 'fc_norm': False, 'img_size': 256}),
    'vit_medium_patch16_gap_384': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'class_token': False, 'global_pool': 'avg', 'qkv_bias': False, 'init_values': 1e-06, 'fc_norm': False, 'img_size': 384}),
    'vit_medium_patch16_reg1_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 256}),
    'vit_medium_patch16_reg4_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 4, 'global_pool': 'avg', 'img_size': 256}),
    'vit_mediumd_patch16_reg4_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 20, 'num_heads': 8, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 4, 'global_pool': 'avg', 'img_size': 256}),
    'vit_mediumd_patch16_reg4_gap_384': ('vit', {'patch_size': 16, 'embed_dim': 512, 'depth': 20, 'num_heads': 8, 'init_values': 1e-05, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 4, 'global_pool': 'avg', 'img_size': 384}),
    'vit_small_patch14_dinov2': ('vit', {'patch_size': 14, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'init_values': 1e-05, 'img_size': 518}),
    'vit_small_patch14_reg4_dinov2': ('vit', {'patch_size': 14, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'init_values': 1e-05, 'reg_tokens': 4, 'no_embed_class': True, 'img_size': 518}),
    'vit_small_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 224}),
    'vit_small_patch16_36x1_224': ('vit', {'patch_size': 16, 'embed_dim': 384, 'depth': 36, 'num_heads': 6, 'init_values': 1e-05, 'img_size': 224}),
    'vit_small_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 384}),
    'vit_small_patch32_224': ('vit', {'patch_size': 32, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 224}),
    'vit_small_patch32_384': ('vit', {'patch_size': 32, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 384}),
    'vit_small_patch8_224': ('vit', {'patch_size': 8, 'embed_dim': 384, 'depth': 12, 'num_heads': 6, 'img_size': 224}),
    'vit_so150m2_patch16_reg1_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 832, 'depth': 21, 'num_heads': 13, 'mlp_ratio': 2.6153846153846154, 'init_values': 1e-05, 'qkv_bias': False, 'class_token': False, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 256}),
    'vit_so150m2_patch16_reg1_gap_384': ('vit', {'patch_size': 16, 'embed_dim': 832, 'depth': 21, 'num_heads': 13, 'mlp_ratio': 2.6153846153846154, 'init_values': 1e-05, 'qkv_bias': False, 'class_token': False, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 384}),
    'vit_so150m2_patch16_reg1_gap_448': ('vit', {'patch_size': 16, 'embed_dim': 832, 'depth': 21, 'num_heads': 13, 'mlp_ratio': 2.6153846153846154, 'init_values': 1e-05, 'qkv_bias': False, 'class_token': False, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 448}),
    'vit_so150m_patch16_reg4_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 896, 'depth': 18, 'num_heads': 14, 'mlp_ratio': 2.572, 'class_token': False, 'reg_tokens': 4, 'global_pool': 'avg', 'fc_norm': False, 'img_size': 256}),
    'vit_so150m_patch16_reg4_gap_384': ('vit', {'patch_size': 16, 'embed_dim': 896, 'depth': 18, 'num_heads': 14, 'mlp_ratio': 2.572, 'class_token': False, 'reg_tokens': 4, 'global_pool': 'avg', 'fc_norm': False, 'img_size': 384}),
    'vit_so400m_patch14_reg1_tipsv2': ('vit', {'patch_size': 14, 'embed_dim': 1152, 'depth': 27, 'num_heads': 16, 'init_values': 1.0, 'mlp_ratio': 3.736111111111111, 'reg_tokens': 1, 'no_embed_class': True, 'img_size': 448}),
    'vit_tiny_patch16_224': ('vit', {'patch_size': 16, 'embed_dim': 192, 'depth': 12, 'num_heads': 3, 'img_size': 224}),
    'vit_tiny_patch16_384': ('vit', {'patch_size': 16, 'embed_dim': 192, 'depth': 12, 'num_heads': 3, 'img_size': 384}),
    'vit_wee_patch16_reg1_gap_256': ('vit', {'patch_size': 16, 'embed_dim': 256, 'depth': 14, 'num_heads': 4, 'init_values': 1e-05, 'mlp_ratio': 5, 'class_token': False, 'no_embed_class': True, 'reg_tokens': 1, 'global_pool': 'avg', 'img_size': 256}),
}


# timm's registered CLIP ViTs, in REGISTERED_VITS' form: the arguments each
# entry point passes besides norm_layer, which is LayerNorm with eps
# CLIP_NORM_EPS (the quick_gelu ones, another activation, are left out).
CLIP_NORM_EPS = 1e-5
REGISTERED_CLIP_VITS: dict[str, tuple[str, dict]] = {
    'vit_base_patch16_clip_224': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12,
        'pre_norm': True, 'img_size': 224}),
    'vit_base_patch16_clip_384': ('vit', {'patch_size': 16, 'embed_dim': 768, 'depth': 12, 'num_heads': 12,
        'pre_norm': True, 'img_size': 384}),
    'vit_base_patch16_plus_clip_240': ('vit', {'patch_size': 16, 'embed_dim': 896, 'depth': 12, 'num_heads': 14,
        'pre_norm': True, 'img_size': 240}),
    'vit_base_patch32_clip_224': ('vit', {'patch_size': 32, 'embed_dim': 768, 'depth': 12, 'num_heads': 12,
        'pre_norm': True, 'img_size': 224}),
    'vit_base_patch32_clip_256': ('vit', {'patch_size': 32, 'embed_dim': 768, 'depth': 12, 'num_heads': 12,
        'pre_norm': True, 'img_size': 256}),
    'vit_base_patch32_clip_384': ('vit', {'patch_size': 32, 'embed_dim': 768, 'depth': 12, 'num_heads': 12,
        'pre_norm': True, 'img_size': 384}),
    'vit_base_patch32_clip_448': ('vit', {'patch_size': 32, 'embed_dim': 768, 'depth': 12, 'num_heads': 12,
        'pre_norm': True, 'img_size': 448}),
    'vit_betwixt_patch32_clip_224': ('vit', {'patch_size': 32, 'embed_dim': 640, 'depth': 12, 'num_heads': 10,
        'pre_norm': True, 'img_size': 224}),
    'vit_giant_patch14_clip_224': ('vit', {'patch_size': 14, 'embed_dim': 1408, 'mlp_ratio': 4.363636363636363,
        'depth': 40, 'num_heads': 16, 'pre_norm': True, 'img_size': 224}),
    'vit_gigantic_patch14_clip_224': ('vit', {'patch_size': 14, 'embed_dim': 1664, 'mlp_ratio': 4.923076923076923,
        'depth': 48, 'num_heads': 16, 'pre_norm': True, 'img_size': 224}),
    'vit_gigantic_patch14_clip_378': ('vit', {'patch_size': 14, 'embed_dim': 1664, 'mlp_ratio': 4.923076923076923,
        'depth': 48, 'num_heads': 16, 'pre_norm': True, 'img_size': 378}),
    'vit_huge_patch14_clip_224': ('vit', {'patch_size': 14, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16,
        'pre_norm': True, 'img_size': 224}),
    'vit_huge_patch14_clip_336': ('vit', {'patch_size': 14, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16,
        'pre_norm': True, 'img_size': 336}),
    'vit_huge_patch14_clip_378': ('vit', {'patch_size': 14, 'embed_dim': 1280, 'depth': 32, 'num_heads': 16,
        'pre_norm': True, 'img_size': 378}),
    'vit_large_patch14_clip_224': ('vit', {'patch_size': 14, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16,
        'pre_norm': True, 'img_size': 224}),
    'vit_large_patch14_clip_336': ('vit', {'patch_size': 14, 'embed_dim': 1024, 'depth': 24, 'num_heads': 16,
        'pre_norm': True, 'img_size': 336}),
    'vit_medium_patch16_clip_224': ('vit', {'embed_dim': 512, 'depth': 12, 'num_heads': 8, 'pre_norm': True,
        'img_size': 224}),
    'vit_medium_patch32_clip_224': ('vit', {'patch_size': 32, 'embed_dim': 512, 'depth': 12, 'num_heads': 8,
        'pre_norm': True, 'img_size': 224}),
    'vit_xsmall_patch16_clip_224': ('vit', {'embed_dim': 256, 'depth': 10, 'num_heads': 4, 'pre_norm': True,
        'img_size': 224}),
}

# name -> (mean, std, interpolation, crop_pct, crop_mode) of its default pretrained
# config: how timm's `resolve_data_config` prepares its images (`TimmAdapter.stated_preprocessing`).
REGISTERED_PREPROCESSING: dict[str, tuple] = {
    'deit3_base_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit3_base_patch16_384': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'deit3_huge_patch14_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit3_large_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit3_large_patch16_384': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'deit3_medium_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit3_small_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit3_small_patch16_384': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'deit_base_distilled_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit_base_distilled_patch16_384': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'deit_base_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit_base_patch16_384': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'deit_small_distilled_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit_small_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit_tiny_distilled_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'deit_tiny_patch16_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'vit_base_patch14_dinov2': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_base_patch14_reg1_tipsv2': ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 'bicubic', 1.0, 'center'),
    'vit_base_patch14_reg4_dinov2': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_base_patch16_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_base_patch16_224_miil': ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 'bilinear', 0.875, 'center'),
    'vit_base_patch16_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_base_patch16_gap_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_base_patch16_plus_240': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_base_patch16_reg4_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_base_patch32_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_base_patch32_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_base_patch32_plus_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_base_patch8_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_betwixt_patch16_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_betwixt_patch16_reg1_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_betwixt_patch16_reg4_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_betwixt_patch16_reg4_gap_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_giant_patch14_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_giant_patch16_gap_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'vit_gigantic_patch14_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_huge_patch14_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_huge_patch14_gap_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'vit_huge_patch16_gap_448': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_large_patch14_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_large_patch14_dinov2': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_large_patch14_reg1_tipsv2': ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 'bicubic', 1.0, 'center'),
    'vit_large_patch14_reg4_dinov2': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_large_patch16_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_large_patch16_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_large_patch32_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_large_patch32_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_little_patch16_reg1_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_little_patch16_reg4_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_medium_patch16_gap_240': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_medium_patch16_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_medium_patch16_gap_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'squash'),
    'vit_medium_patch16_reg1_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_medium_patch16_reg4_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_mediumd_patch16_reg4_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_mediumd_patch16_reg4_gap_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_small_patch14_dinov2': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_small_patch14_reg4_dinov2': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 1.0, 'center'),
    'vit_small_patch16_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_small_patch16_36x1_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_small_patch16_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_small_patch32_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_small_patch32_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_small_patch8_224': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 'bicubic', 0.9, 'center'),
    'vit_so150m2_patch16_reg1_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_so150m2_patch16_reg1_gap_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_so150m2_patch16_reg1_gap_448': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'squash'),
    'vit_so150m_patch16_reg4_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
    'vit_so150m_patch16_reg4_gap_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_so400m_patch14_reg1_tipsv2': ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 'bicubic', 1.0, 'center'),
    'vit_tiny_patch16_224': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.9, 'center'),
    'vit_tiny_patch16_384': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 1.0, 'center'),
    'vit_wee_patch16_reg1_gap_256': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 'bicubic', 0.95, 'center'),
}

def _resolved(args: dict) -> dict:
    """`args` over VisionTransformer's defaults, with fc_norm as timm resolves
    it: None means a norm after pooling for the pooled (avg, max) outputs, and
    none without a final norm."""
    full = {**VISION_TRANSFORMER_DEFAULTS, **args}
    pooled = full["global_pool"] in ("avg", "avgmax", "max") if full["fc_norm"] is None else full["fc_norm"]
    return {**full, "fc_norm": bool(full["final_norm"] and pooled)}


def _differing(mine: dict, registered: dict) -> list[str]:
    """The arguments of `mine` (lg's model_args) that the registered model's
    `registered` (resolved) would build otherwise."""
    differ = []
    for key in USABLE_KWARGS:
        if key == "mlp_ratio":  # timm builds int(width * ratio) hidden units
            width = mine["embed_dim"]
            same = int(width * mine[key]) == int(width * registered[key])
        elif key == "init_values":  # only whether layer scales exist: their values are loaded
            same = (mine[key] is None) == (registered[key] is None)
        else:
            same = mine[key] == registered[key]
        if not same:
            differ.append(key)
    if "global_pool" in differ and "fc_norm" not in differ:
        differ.append("fc_norm")  # timm resolves fc_norm from the pooling unless it is given
    return differ


def registered_alike(name: str) -> list[str]:
    """The other registered models of `name`'s very architecture (timm's
    vit_tiny_patch16_224 and deit_tiny_patch16_224: one architecture, two
    trainings, each with its own preprocessing)."""
    kind, args = REGISTERED_VITS[name]
    mine = _resolved(args)
    return [other for other, (other_kind, other_args) in REGISTERED_VITS.items()
            if other != name and other_kind == kind and not _differing(mine, _resolved(other_args))]


def registered_name(args: dict, distilled: bool, preferred: str) -> tuple[str, list[str]]:
    """(the registered timm model closest to lg's model_args `args`, the
    arguments that differ from it): one whose architecture `args` is when it
    exists (no difference), else the one with the fewest differences
    (`preferred`, then a vit_ name, on a tie). Only models with the norms of
    `preferred`, the model lg builds, are candidates: a CLIP ViT's (eps 1e-5)
    when it is one of them, else the others' (1e-6), which no argument could
    make the same."""
    mine = _resolved({key: args[key] for key in USABLE_KWARGS})
    kind = "deit-distilled" if distilled else "vit"
    table = REGISTERED_CLIP_VITS if preferred in REGISTERED_CLIP_VITS else REGISTERED_VITS
    found = []
    for name, (registered_kind, registered_args) in table.items():
        if registered_kind == kind:
            differ = _differing(mine, _resolved(registered_args))
            if any(mine[key] is None for key in differ):
                continue  # timm.create_model drops arguments given as None: no layer scale cannot be asked for
            found.append((len(differ), name != preferred, not name.startswith("vit_"), name, differ))
    _, _, _, name, differ = min(found)
    return name, differ


def registered_preprocessing(registered: str | None, input_size: tuple[int, int, int]) -> Preprocessing | None:
    """The default pretrained config of the `registered` timm model the
    file's architecture is (lg's table of timm's registry), else nothing."""
    if registered is None or registered not in REGISTERED_PREPROCESSING:
        return None
    mean, std, interpolation, crop_pct, crop_mode = REGISTERED_PREPROCESSING[registered]
    if len(mean) != input_size[0]:
        return None
    recipe = from_record({"mean": mean, "std": std, "interpolation": interpolation, "crop_pct": crop_pct,
                          "crop_mode": crop_mode}, input_size,
                         f"timm's default pretrained_cfg of {registered} (the file's architecture)")
    # One architecture, several trainings prepared otherwise: the load
    # line's model is taken, and said to be assumed.
    others = [name for name in registered_alike(registered)
              if REGISTERED_PREPROCESSING[name] != REGISTERED_PREPROCESSING[registered]]
    if others:
        return dataclasses.replace(
            recipe, assumed=True, source=f"timm's default pretrained_cfg of {registered}, assumed: the file's "
                                         f"architecture is also {', '.join(others)}'s, prepared otherwise")
    return recipe
