import asyncio, time
from e2b import Sandbox, AsyncSandbox
import e2b
steps = []
def step(name, fn):
    try:
        r = fn(); steps.append((name, 'ok')); return r
    except Exception as e:
        steps.append((name, 'raised %s: %s' % (type(e).__name__, str(e)[:200])))
async def amain():
    s = await AsyncSandbox.create(timeout=60)
    r = await s.commands.run('echo async')
    steps.append(('async run', r.stdout.strip()))
    await s.kill()
asyncio.run(amain())
sbx = Sandbox.create(timeout=120)
sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done', background=True, timeout=0)
time.sleep(0.5)
step('pause', lambda: sbx.beta_pause() if hasattr(sbx, 'beta_pause') else sbx.pause())
step('connect', lambda: Sandbox.connect(sbx.sandbox_id))
step('count after resume', lambda: steps.append(('count', sbx.commands.run('cat /tmp/c').stdout.strip())))
step('snapshot', lambda: steps.append(('snap', str(sbx.create_snapshot()))))
step('unknown', lambda: Sandbox.connect('inosuchsandbox0000000'))
step('wrong key', lambda: Sandbox.create(api_key='e2b_' + '1'*40))
step('cmd timeout', lambda: sbx.commands.run('sleep 5', timeout=1))
step('missing file', lambda: sbx.files.read('/nope'))
sbx.kill()
for s in steps: print(s)
