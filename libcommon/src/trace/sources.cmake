# trace: Chrome Trace Event writing/reading, trace statistics and merging, flame graphs (rtx-trace, rtx-flame).
