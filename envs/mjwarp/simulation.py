"""N worlds of one MuJoCo model stepped and ray-traced by MuJoCo Warp on a torch device, with
zero-copy torch views.

Views, so the tasks read and write state with batched torch ops on the device (N = worlds; float32):
    qpos, qvel, ctrl, eq_active (bool), xpos, xquat, xmat (N, nbody, 3, 3), site_xpos,
        subtree_com: MuJoCo's, (N, ...)
    cvel (N, nbody, 6) [angular, linear]; eq_data (N, neq, 12), one row per world only if the
        task asks for it batched
    contact_geom (C, 2), contact_worldid (C,), num_contacts (1,): all worlds' active contacts
    overflow (N,) int: MuJoCo Warp's OverflowType bits since the world's last `reset` (read by
        `broken`)
Derived fields (x*, cvel, subtree_com) describe the positions after `sync`."""

import contextlib
from dataclasses import dataclass

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

from errors import UserError

wp.config.log_level = wp.LOG_WARNING  # kernel-cache lines on every start otherwise
# overflows that drop contacts or constraint rows: the world's physics is wrong from there
LOST = (mjw.OverflowType.NEFC | mjw.OverflowType.NJMAX_NNZ | mjw.OverflowType.BROADPHASE
        | mjw.OverflowType.NARROWPHASE | mjw.OverflowType.CCD)


@dataclass(frozen=True)
class WarpCamera:
    """The model's camera `index` at `size` x `size` pixels; without `skybox` a ray that hits
    nothing is black."""
    index: int
    size: int
    shadows: bool = False
    skybox: bool = False


class Simulation:
    def __init__(self, mjm: mujoco.MjModel, *, num_worlds: int, device: torch.device,
                 camera: WarpCamera | None,
                 batched_model_fields: tuple[str, ...] = (), max_constraints: int | None = None,
                 graphs: bool = True):
        """`camera` None: no renderer. `max_constraints`: constraint rows per world (None: MuJoCo
        Warp's guess). `graphs` False: launch directly, the reference the captured graphs are tested
        against."""
        self.mjm, self.num_worlds, self.device = mjm, num_worlds, torch.device(device)
        try:
            wp.init()
        except OSError as err:
            raise UserError(f"MuJoCo Warp cannot create its kernel cache folder ({err.strerror}: "
                            f"{err.filename}); make it writable, or set WARP_CACHE_PATH to a "
                            "writable folder") from None
        # by name: "cuda" without an index is the current GPU (wp.device_from_torch needs an index)
        self._wp_device = wp.get_device(str(self.device))
        self._stream = wp.Stream(self._wp_device) if self.device.type == "cuda" else None
        # MuJoCo Warp's solver loop needs conditional graph nodes on CUDA (a 12.4+ driver); else
        # direct launches
        capturable = self.device.type != "cuda" or wp.is_conditional_graph_supported()
        self._graphs = {} if graphs and capturable else None
        with self.scope():
            self.model = mjw.put_model(mjm,
                                       batch_sizes={name: num_worlds
                                                    for name in batched_model_fields})
            # MuJoCo Warp prints a line per world and step that overflows; `broken` reports them
            # once instead
            self.model.opt.warn_overflow = 0
            reference = mujoco.MjData(mjm)
            mujoco.mj_forward(mjm, reference)
            self.data = mjw.put_data(mjm, reference, nworld=num_worlds, njmax=max_constraints)
            self.render_context = None
            if camera is not None:
                self.render_context = mjw.create_render_context(
                    mjm, nworld=num_worlds, cam_res=(camera.size, camera.size), render_rgb=True,
                    render_depth=False,
                    cam_active=[camera.index], use_shadows=camera.shadows,
                    render_skybox=camera.skybox)
        view = wp.to_torch
        d = self.data
        self.qpos, self.qvel, self.ctrl, self.eq_active = (view(d.qpos), view(d.qvel), view(d.ctrl),
                                                           view(d.eq_active))
        self.xpos, self.xquat, self.xmat = view(d.xpos), view(d.xquat), view(d.xmat)
        self.site_xpos, self.cvel, self.subtree_com = (view(d.site_xpos), view(d.cvel),
                                                       view(d.subtree_com))
        self.eq_data = view(self.model.eq_data)
        self.contact_geom, self.contact_worldid, self.num_contacts = (
            view(d.contact.geom), view(d.contact.worldid), view(d.nacon))
        self.overflow = view(d.overflow)
        # `reset`'s mask where its captured graph reads it
        self._reset_mask = torch.zeros(num_worlds, dtype=torch.bool, device=self.device)
        self._reset_mask_warp = wp.from_torch(self._reset_mask)
        self._pixel_bytes = None
        if camera is not None:
            packed = view(self.render_context.rgb_data).view(torch.uint8)
            self._pixel_bytes = packed.view(num_worlds, camera.size, camera.size, 4)

    @contextlib.contextmanager
    def scope(self):
        """Warp on this simulation's device; on CUDA on its own stream (graphs cannot be captured on
        torch's default one), ordered after torch's current stream on entry and before it on exit,
        without host syncs."""
        with wp.ScopedDevice(self._wp_device):
            if self.device.type != "cuda":
                yield
                return
            torch_stream = wp.stream_from_torch(self.device)
            self._stream.wait_stream(torch_stream)
            try:
                with wp.ScopedStream(self._stream, sync_enter=False):
                    yield
            finally:
                torch_stream.wait_stream(self._stream)

    def _replay(self, name: str, launches) -> None:
        """Run `launches` as a graph, captured at the first call under `name` and replayed after: a
        physics step is ~100 launches, and replayed they skip Python's launch overhead and the
        solver's host reads."""
        with self.scope():
            if self._graphs is None:
                launches()
                return
            if name not in self._graphs:
                with wp.ScopedCapture() as capture:
                    launches()
                self._graphs[name] = capture.graph
            wp.capture_launch(self._graphs[name])

    def step(self, substeps: int) -> None:
        """`substeps` physics steps of every world (mj_step: forward dynamics at the current state,
        integrate)."""
        def launches():
            for _ in range(substeps):
                mjw.step(self.model, self.data)

        self._replay(f"step{substeps}", launches)

    def sync(self) -> None:
        """Positions, velocities and cameras computed at the current qpos/qvel, as dm_control does
        after a step (after mj_step they describe the state before its last integration); contacts
        are left as they were."""
        def launches():
            mjw.kinematics(self.model, self.data)
            mjw.com_pos(self.model, self.data)
            mjw.com_vel(self.model, self.data)
            mjw.camlight(self.model, self.data)

        self._replay("sync", launches)

    def reset(self, mask: torch.Tensor) -> None:
        """mj_resetData for the worlds in `mask` (bool (N,)); the task then writes its initial
        qpos/qvel/ctrl. World 0's reset empties every world's contacts (one count for all): the next
        step finds them before a task reads."""
        self._reset_mask.copy_(mask)
        self._replay("reset",
                     lambda: mjw.reset_data(self.model, self.data, reset=self._reset_mask_warp))

    def broken(self) -> torch.Tensor:
        """bool (N,): worlds whose physics went wrong since their `reset`: contacts or constraint
        rows dropped, or a position or velocity beyond mjMAXVAL or NaN."""
        lost = (self.overflow & LOST) != 0
        bounded = ((self.qpos.abs() <= mujoco.mjMAXVAL).all(1)
                   & (self.qvel.abs() <= mujoco.mjMAXVAL).all(1))
        return lost | ~bounded

    def render(self) -> torch.Tensor:
        """Every world's camera image of the current positions (call `sync` first): uint8 (N, 3, H,
        W)."""
        def launches():
            mjw.refit_bvh(self.model, self.data, self.render_context)
            mjw.render(self.model, self.data, self.render_context)

        self._replay("render", launches)
        # a pixel is uint32 0xAARRGGBB: bytes B, G, R, A in little-endian memory, so RGB is the
        # first three reversed
        return self._pixel_bytes[..., :3].flip(-1).permute(0, 3, 1, 2)
