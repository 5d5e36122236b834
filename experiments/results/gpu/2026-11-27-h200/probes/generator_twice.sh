# run from the repository root on the lent machine, after scripts/gpu/stage.sh
eval "$(bash scripts/gpu/stage.sh env)"; cd experiments && python3 -c "
import gpu_benchmark as g
for i in range(2):
    r = g.generator(100, 10); print(i, round(r['pairs / s'],1), round(r['plain loop pairs / s'],1))
" 2>&1 | grep -v INFO | tail -3
