"""Reference for lr_schedule_test: the learning rates torch.optim.lr_scheduler gives the schedules
that launcher/training/lr_schedule.hpp defines, built from torch's own scheduler classes.
Usage: lr_schedule_reference.py OUT NAME BASE_LR TOTAL_STEPS WARMUP STEP_SIZE GAMMA COUNT
OUT: float64 lr[COUNT], param_group['lr'] before optimizer steps 0 .. COUNT-1.
Exits with 77 when torch cannot be imported."""
import array
import sys
import warnings

try:
    import torch
    from torch.optim import lr_scheduler
except ImportError as error:
    print("import torch failed:", error, file=sys.stderr)
    sys.exit(77)


def build_schedule(optimizer, name, total_steps, warmup, step_size, gamma):
    """The schedule of lr_schedule.hpp, stepped once per optimizer step."""
    main_steps = total_steps - warmup
    if name == "constant":
        main = lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda step: 1.0)
    elif name == "step":
        main = lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=gamma)
    elif name == "cosine":
        main = lr_scheduler.CosineAnnealingLR(optimizer, T_max=main_steps, eta_min=0)
    elif name == "linear":
        main = lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.0,
                                     total_iters=main_steps)
    else:
        raise SystemExit("unknown schedule " + name)
    if warmup == 0:
        return main
    ramp = lr_scheduler.LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0,
                                 total_iters=warmup)
    return lr_scheduler.SequentialLR(optimizer, schedulers=[ramp, main], milestones=[warmup])


def main():
    out, name, base_lr, total_steps, warmup, step_size, gamma, count = sys.argv[1:9]
    # SequentialLR steps the main schedule with an explicit epoch at the milestone, which torch
    # reports as deprecated; that is the behaviour being reproduced.
    warnings.filterwarnings("ignore", category=UserWarning)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=float(base_lr))
    schedule = build_schedule(optimizer, name, int(total_steps), int(warmup), int(step_size),
                              float(gamma))
    rates = []
    for _ in range(int(count)):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    open(out, "wb").write(array.array("d", rates).tobytes())


if __name__ == "__main__":
    main()
