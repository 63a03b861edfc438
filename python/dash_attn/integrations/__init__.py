# SPDX-License-Identifier: Apache-2.0
"""Integrations of dash_attn with other libraries. Each is a module imported on request, so that dash_attn itself
never imports them:

    import dash_attn.integrations.transformers   # HuggingFace transformers: attn_implementation="dash"
"""
