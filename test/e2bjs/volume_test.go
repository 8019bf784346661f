package e2bjs

import (
	"syscall"
	"testing"
)

// TestVolumesSurviveRestart: after kill -9 of `hutch serve` and a restart,
// a volume is still there with its token and files, a running sandbox
// still sees it mounted and lists it, and destroy is still refused while
// that sandbox lives (the server knows it from the sandbox's record).
func TestVolumesSurviveRestart(t *testing.T) {
	dir := jsPackage(t)
	s := startServe(t)
	out := nodeScript(t, s, dir, `
import { Sandbox, Volume } from 'e2b'
const vol = await Volume.create('restart-' + Date.now())
const sbx = await Sandbox.create({ volumeMounts: { '/mnt/v': vol }, timeoutMs: 600_000 })
await sbx.files.write('/mnt/v/before.txt', 'before the restart')
console.log(JSON.stringify({ vol: vol.volumeId, token: vol.token, sbx: sbx.sandboxId }))
process.exit(0)
`)
	s.Stop(syscall.SIGKILL)
	s.Start()
	nodeScript(t, s, dir, `
import assert from 'node:assert/strict'
import { Sandbox, Volume } from 'e2b'
const made = JSON.parse(process.argv[1])
const vol = await Volume.connect(made.vol)
assert.equal(vol.token, made.token)
assert.equal(await vol.readFile('/before.txt'), 'before the restart')
const sbx = await Sandbox.connect(made.sbx)
assert.deepEqual((await sbx.getInfo()).volumeMounts, [{ name: vol.name, path: '/mnt/v' }])
await sbx.files.write('/mnt/v/after.txt', 'after')
assert.equal(await vol.readFile('/after.txt'), 'after')
await assert.rejects(Volume.destroy(made.vol), /409/)
await sbx.kill()
assert.equal(await Volume.destroy(made.vol), true)
`, out)
}
