async function* pages() {
  for (const node of ["pve1", "pve2"]) yield await tools.vm_list({ node });
}
let count = 0;
for await (const page of pages()) count += page.length;
count
