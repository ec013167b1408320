"""The AlphaFold2 monomer model (AF2 Alg 2) with recycling (Alg 30/32).

Input: AF2's processed feature dict, every tensor with a leading recycle dimension ``R``
(``aatype [R, N]``, ``target_feat [R, N, 22]``, ``msa_feat [R, S, N, 49]``, ``msa_mask``, ``seq_mask``,
``residue_index``, ``extra_msa`` / ``extra_msa_mask`` / ``extra_has_deletion`` /
``extra_deletion_value [R, S_e, N]``, ``residx_atom37_to_atom14``, ``atom37_atom_exists`` and, with
templates, ``template_aatype [R, T, N]``, ``template_all_atom_positions [R, T, N, 37, 3]``,
``template_all_atom_masks``, ``template_mask [R, T]``, ``template_pseudo_beta``(+``_mask``); optional
``template_angle_feat [R, T, N, 57]`` replaces the angle features computed from the template atoms).
Pass ``R`` = ``num_recycle + 1`` feature sets; cycle ``r`` reads set ``r``. An optional batch
dimension may precede ``R`` (``[B, R, ...]``) with ``batch_dims=1``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from foldworks.models.af2 import heads as H
from foldworks.models.af2.config import AF2Config
from foldworks.models.af2.embedders import ExtraMSAEmbedder, InputEmbedder, RecyclingEmbedder, TemplateEmbedder
from foldworks.models.af2.evoformer import BlockStack
from foldworks.models.af2.structure import StructureModule


class AuxiliaryHeads(nn.Module):
    """The output heads (``plddt``, ``distogram``, ``masked_msa``, ``experimentally_resolved``, ``tm``)."""

    def __init__(self, cfg: AF2Config) -> None:
        super().__init__()
        self.plddt = H.PLDDTHead(cfg.c_s, cfg.c_plddt, cfg.plddt_bins)
        self.distogram = H.DistogramHead(cfg.c_z, cfg.distogram_bins)
        self.masked_msa = H.MaskedMSAHead(cfg.c_m, cfg.masked_msa_classes)
        self.experimentally_resolved = H.ExperimentallyResolvedHead(cfg.c_s)
        if cfg.ptm:
            self.tm = H.TMScoreHead(cfg.c_z, cfg.pae_bins)


def _stack_kwargs(cfg: AF2Config, extra: bool) -> dict:
    return dict(
        c_m=cfg.c_e if extra else cfg.c_m, c_z=cfg.c_z,
        c_hidden_msa=cfg.extra_c_hidden_msa if extra else cfg.c_hidden_msa,
        msa_heads=cfg.extra_msa_heads if extra else cfg.msa_heads,
        c_hidden_opm=cfg.extra_c_hidden_opm if extra else cfg.c_hidden_opm,
        c_hidden_mul=cfg.extra_c_hidden_mul if extra else cfg.c_hidden_mul,
        c_hidden_pair=cfg.c_hidden_pair, pair_heads=cfg.pair_heads, factor=cfg.transition_factor,
        msa_dropout=cfg.msa_dropout, pair_dropout=cfg.pair_dropout, global_column=extra)


class AlphaFold2(nn.Module):
    """AF2 monomer (Alg 2). Module and parameter names equal OpenFold's ``AlphaFold`` state dict."""

    def __init__(self, cfg: AF2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_embedder = InputEmbedder(22, 49, cfg.c_m, cfg.c_z, cfg.relpos_k)
        self.recycling_embedder = RecyclingEmbedder(cfg.c_m, cfg.c_z, *cfg.recycle_bins)
        if cfg.templates:
            self.template_embedder = TemplateEmbedder(cfg)
        self.extra_msa_embedder = ExtraMSAEmbedder(25, cfg.c_e)
        self.extra_msa_stack = BlockStack(cfg.num_extra_blocks, None, cfg.checkpointing, **_stack_kwargs(cfg, True))
        self.evoformer = BlockStack(cfg.num_evoformer_blocks, cfg.c_s, cfg.checkpointing, **_stack_kwargs(cfg, False))
        self.structure_module = StructureModule(cfg)
        self.aux_heads = AuxiliaryHeads(cfg)

    def set_chunk_size(self, chunk_size: int | None) -> None:
        """Process attention in chunks of ``chunk_size`` rows (memory ∝ chunk, same results); None =
        unchunked, except cache-sized chunks on CPU without gradients."""
        from foldworks.models.af2.primitives import Attention

        for module in self.modules():
            if isinstance(module, Attention):
                module.chunk_size = chunk_size

    @classmethod
    def from_config(cls, values: dict) -> "AlphaFold2":
        """Build from a config dict (see :func:`~foldworks.models.af2.config.config_from_json`)."""
        from foldworks.models.af2.config import config_from_json

        return cls(config_from_json(values))

    def iteration(self, feats: dict[str, Tensor], prev: dict[str, Tensor]) -> dict[str, Tensor]:
        """One pass of Alg 2 on one feature set (no recycle dimension). The structure module runs in
        fp32 even under autocast."""
        seq_mask = feats["seq_mask"]
        pair_mask = seq_mask[..., :, None] * seq_mask[..., None, :]
        m, z = self.input_embedder(feats["target_feat"], feats["residue_index"], feats["msa_feat"])
        m0_up, z_up = self.recycling_embedder(feats["aatype"], prev["msa_first_row"], prev["pair"], prev["positions"])
        m = torch.cat([m[..., :1, :, :] + m0_up[..., None, :, :], m[..., 1:, :, :]], -3)
        z = z + z_up
        msa_mask = feats["msa_mask"]
        num_msa = m.shape[-3]
        if self.cfg.templates:
            z = z + self.template_embedder.pair(feats, z, pair_mask)
            t_rows, t_mask = self.template_embedder.single(feats)
            m = torch.cat([m, t_rows], -3)
            msa_mask = torch.cat([msa_mask, t_mask], -2)
        e = self.extra_msa_embedder(feats)
        _, z = self.extra_msa_stack(e, z, feats["extra_msa_mask"], pair_mask)
        m, z = self.evoformer(m, z, msa_mask, pair_mask)
        single = self.evoformer.linear(m[..., 0, :, :])
        with torch.autocast(device_type=single.device.type, enabled=False):  # frames and atoms in fp32
            sm = self.structure_module(single.float(), z.float(), feats["aatype"], seq_mask.float())
        atom14 = sm["positions"][-1]
        index = feats["residx_atom37_to_atom14"].long()
        atom37 = torch.gather(atom14, -2, index[..., None].expand(*index.shape, 3))
        atom37 = atom37 * feats["atom37_atom_exists"][..., None]
        return {"msa": m[..., :num_msa, :, :], "msa_first_row": m[..., 0, :, :], "pair": z, "single": single,
                "sm": sm, "final_atom_positions": atom37, "final_atom_mask": feats["atom37_atom_exists"],
                "final_atom14_positions": atom14}

    def heads(self, out: dict[str, Tensor]) -> dict[str, Tensor]:
        """Head logits and confidence metrics (pLDDT 0–100; PAE and pTM with the ``tm`` head); the
        metrics are computed in fp32 under autocast."""
        aux = self.aux_heads
        res = {"distogram_logits": aux.distogram(out["pair"]), "masked_msa_logits": aux.masked_msa(out["msa"]),
               "lddt_logits": aux.plddt(out["sm"]["single"]),
               "experimentally_resolved_logits": aux.experimentally_resolved(out["single"])}
        res["plddt"] = H.plddt(res["lddt_logits"].float())
        if self.cfg.ptm:
            res["tm_logits"] = aux.tm(out["pair"])
            tm = res["tm_logits"].float()
            res.update(H.predicted_aligned_error(tm, self.cfg.pae_max_error_bin))
            if tm.dim() == 3:
                res["ptm_score"] = H.predicted_tm_score(tm, self.cfg.pae_max_error_bin)
        return res

    def forward(self, batch: dict[str, Tensor], batch_dims: int = 0) -> dict[str, Tensor]:
        """Run ``R`` cycles (R = the recycle dimension at position ``batch_dims``); gradients flow only
        through the last cycle. Returns the last cycle's representations, structure and heads."""
        num_cycles = batch["aatype"].shape[batch_dims]
        n_res = batch["aatype"].shape[-1]
        lead = batch["aatype"].shape[:batch_dims]
        ref = batch["target_feat"]
        prev = {"msa_first_row": ref.new_zeros(*lead, n_res, self.cfg.c_m),
                "pair": ref.new_zeros(*lead, n_res, n_res, self.cfg.c_z),
                "positions": ref.new_zeros(*lead, n_res, 37, 3)}
        out: dict[str, Tensor] = {}
        for cycle in range(num_cycles):
            feats = {k: v.select(batch_dims, cycle) for k, v in batch.items()
                     if torch.is_tensor(v) and v.dim() > batch_dims}
            last = cycle == num_cycles - 1
            with torch.set_grad_enabled(last and torch.is_grad_enabled()):
                out = self.iteration(feats, prev)
            if not last:
                prev = {"msa_first_row": out["msa_first_row"].detach(), "pair": out["pair"].detach(),
                        "positions": out["final_atom_positions"].detach()}
        out.update(self.heads(out))
        return out


def count_parameters(cfg: AF2Config) -> int:
    """Number of parameters of the model for ``cfg`` (built on the ``meta`` device: no memory)."""
    with torch.device("meta"):
        model = AlphaFold2(cfg)
    return sum(p.numel() for p in model.parameters())
