import csv,collections,sys
def load(fn):
    rows=[r for r in csv.reader(open(fn)) if len(r)>10]
    h=rows[0]; iK=h.index("Kernel Name"); iM=h.index("Metric Name"); iV=h.index("Metric Value"); iID=h.index("ID")
    k=collections.OrderedDict()
    for r in rows[1:]: k.setdefault(int(r[iID]),{"name":r[iK]})[r[iM]]=r[iV]
    return [(i,d["name"],float(d["gpu__time_duration.sum"].replace(",",""))/1000,d.get("launch__grid_size")) for i,d in k.items()]
for fn in sys.argv[1:]:
    ks=load(fn)
    idx=[j for j,(i,n,t,g) in enumerate(ks) if n.startswith("gather_batch")]
    print("==",fn, "gathers at", idx)
    for a,b in zip(idx,idx[1:]):
        step=ks[a:b]; tot=sum(t for _,_,t,_ in step)
        print(" step: %d kernels, %.1f us device time" % (len(step), tot))
        cats=collections.Counter()
        for _,n,t,_ in step:
            c=("gemm(cuBLASLt)" if ("nvjet" in n or "cutlass" in n or "magma" in n or "cublasLt" in n or "splitK" in n or "Bgrad" in n) else
               "conv(cuDNN)" if ("xmma" in n or "convolve" in n or "cudnn" in n) else
               "optimizer+scaler" if any(x in n for x in ("optim","unscale","scaler","lr_update","step_begin")) else
               "bias/channel sums" if ("bias_grad" in n or "channel_sum" in n) else
               "fp8 casts" if "fp8" in n else "other ours")
            cats[c]+=t
        for c,t in cats.most_common(): print("   %-20s %7.1f us" % (c,t))
        for _,n,t,g in sorted(step,key=lambda x:-x[2])[:6]: print("     %7.1f us  grid %s  %s" % (t,g,n[:90]))
        break
