import os, time, traceback
from e2b import Sandbox
steps = []
def step(name, fn):
    t = time.time()
    try:
        r = fn()
        steps.append((name, 'ok', round((time.time()-t)*1000)))
        return r
    except Exception as e:
        steps.append((name, 'FAIL %s: %s' % (type(e).__name__, str(e)[:300]), round((time.time()-t)*1000)))
sbx = step('create', lambda: Sandbox.create(metadata={'suite': 'py'}, envs={'K': 'v'}, timeout=120))
if sbx:
    step('run', lambda: print(sbx.commands.run('echo hi $K; id -un').stdout))
    step('write', lambda: sbx.files.write('/home/user/a.txt', 'hello'))
    step('read', lambda: print(sbx.files.read('/home/user/a.txt')))
    step('list', lambda: print([e.name for e in sbx.files.list('/home/user')]))
    step('exists', lambda: print(sbx.files.exists('/home/user/a.txt')))
    step('get_info', lambda: print(sbx.get_info()))
    step('is_running', lambda: print(sbx.is_running()))
    step('set_timeout', lambda: sbx.set_timeout(60))
    step('background', lambda: print(sbx.commands.run('sleep 1; echo bg', background=True).wait().stdout))
    step('list sandboxes', lambda: print([s.sandbox_id for s in Sandbox.list().next_items()]))
    step('metrics', lambda: print(sbx.get_metrics()))
    step('pty', lambda: print(sbx.pty.create(size=__import__('e2b').PtySize(rows=24, cols=80))))
    step('watch', lambda: sbx.files.watch_dir('/home/user'))
    step('url', lambda: print(sbx.download_url('/home/user/a.txt')))
    step('kill', lambda: sbx.kill())
for s in steps: print(s)
