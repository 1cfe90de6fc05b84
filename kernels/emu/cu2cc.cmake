# cu2cc.cmake - turns a .cu file into C++ for the gantry CUDA emulator (kernels/emu/).
#   cmake -DIN=file.cu -DOUT=file.cc -P cu2cc.cmake
# Rewrites the two pieces of CUDA syntax a C++ compiler cannot parse, nothing else:
#   name<<<cfg>>>(args)          ->  emu::launch(emu::launch_cfg(cfg), name)(args)
#   extern __shared__ T name[];  ->  T *name = (T *)emu::dyn_smem();
# `name` may carry template arguments (kernel<float><<<...>>>). A #line directive keeps compiler
# messages and debuggers pointing at the .cu file.
file(READ "${IN}" src)
string(REGEX REPLACE "extern[ \t]+__shared__[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\\[[ \t]*\\][ \t]*;"
       "\\1 *\\2 = (\\1 *)emu::dyn_smem();" src "${src}")
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_:]*(<[^<>;()]*>)?)[ \t]*<<<([^;]*)>>>"
       "emu::launch(emu::launch_cfg(\\3), \\1)" src "${src}")
if(src MATCHES "<<<|>>>|extern[ \t]+__shared__")
    message(FATAL_ERROR "cu2cc: ${IN}: a launch or extern __shared__ declaration this script "
                        "cannot rewrite is left; keep launches on the pattern name<<<cfg>>>(args)")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${src}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
