"""Client CPU per 100 KB ranged S3 GET (issue 39): the usual way (s3fs `_call_s3("get_object")`), the presigned URL
(`ranged_get.fetch_range`, `io/signed_get.py`) and, as the floor, the HTTP backend on the same presigned URL.

moto in its own process on 127.0.0.1 behind a keep-alive front (its own process too); 400 GETs of 100 KB at random
offsets of eight 4 MB objects, 16 in flight; psutil CPU (user+sys) of this process only, three rounds after a
warm-up. Run: `PYTHONPATH=src python benchmarks/s3_get_cpu.py`.
"""
import asyncio, os, random, socket, subprocess, sys, time
import psutil

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

port = free_port()
import atexit
moto = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
# moto answers "Connection: close"; S3 keeps connections alive. A keep-alive front in its own process (aiohttp
# server, a fresh connection to moto per request) gives the client what S3 gives it. Its CPU is not the client's.
FRONT = """
import sys, aiohttp
from aiohttp import web
target = f"http://127.0.0.1:{sys.argv[1]}"
async def handle(request):
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "connection", "content-length")}
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        async with s.request(request.method, target + request.path_qs, headers=headers, data=body or None,
                             allow_redirects=False) as r:
            data = await r.read()
            out = {k: v for k, v in r.headers.items() if k.lower() not in ("connection", "content-length",
                                                                            "transfer-encoding", "content-encoding")}
            return web.Response(status=r.status, headers=out, body=data)
app = web.Application(client_max_size=1 << 30); app.router.add_route("*", "/{tail:.*}", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=None, access_log=None)
"""
front_port = free_port()
front = subprocess.Popen([sys.executable, "-c", FRONT, str(port), str(front_port)])
for proc in (moto, front):
    atexit.register(proc.wait)
    atexit.register(proc.terminate)
os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{front_port}"})
for p in (port, front_port):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", p), timeout=0.2).close(); break
        except OSError:
            time.sleep(0.1)
import s3fs
from fsspec.asyn import sync
from audiotree.io import ranged_get, signed_get

fs = s3fs.S3FileSystem()
fs.mkdir("bench")
OBJECTS = [f"s3://bench/o{i}.bin" for i in range(8)]
for u in OBJECTS:
    fs.pipe(u, os.urandom(4 << 20))
N, IN_FLIGHT, SIZE = 400, 16, 100_000
rng = random.Random(0)
jobs = [(rng.choice(OBJECTS), rng.randrange(0, (4 << 20) - SIZE)) for _ in range(N)]

async def old_get(url, start, stop):  # the code of ranged_get._s3 before presigning
    bucket, key, version = fs.split_path(url)
    resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}")
    try:
        data = await resp["Body"].read()
    finally:
        resp["Body"].close()
    status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode", 206)
    return ranged_get.check_answer(url, int(status), resp.get("ContentRange"), data, start, stop)

async def new_get(url, start, stop):
    return await ranged_get.fetch_range(fs, url, start, stop)

import fsspec
http_fs = fsspec.filesystem("http", skip_instance_cache=True)
http_fs.loop  # the same loop
SIGNED = {u: fs.url(u, expires=3600) for u in OBJECTS}

async def http_get(url, start, stop):  # the HTTP backend (aiohttp) on the same URL: the floor
    return await ranged_get.fetch_range(http_fs, SIGNED[url], start, stop)

async def run(get):
    sem = asyncio.Semaphore(IN_FLIGHT)
    async def one(u, a):
        async with sem:
            ans = await get(u, a, a + SIZE)
            assert len(ans.data) == SIZE
    await asyncio.gather(*(one(u, a) for u, a in jobs))

me = psutil.Process()
def cpu():
    t = me.cpu_times(); return t.user + t.system

results = {"old": [], "new": [], "http": []}
for get in (old_get, new_get, http_get):  # warm: connections, signed URLs
    sync(fs.loop, run, get)
for rep in range(3):
    for name, get in (("old", old_get), ("new", new_get), ("http", http_get)):
        c0, w0 = cpu(), time.perf_counter()
        sync(fs.loop, run, get)
        results[name].append(((cpu() - c0) / N * 1e3, (time.perf_counter() - w0)))
for name, r in results.items():
    print(name, "ms CPU/GET:", " ".join(f"{c:.3f}" for c, _ in r), " wall s:", " ".join(f"{w:.2f}" for _, w in r))
old = sorted(c for c, _ in results["old"])[1]; new = sorted(c for c, _ in results["new"])[1]
http = sorted(c for c, _ in results["http"])[1]
print(f"median old {old:.3f} ms, new {new:.3f} ms, http {http:.3f} ms, ratio old/new {old / new:.1f}x; signed_gets {signed_get.signed_gets()}")

